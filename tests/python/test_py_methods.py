"""kvlab.methods / kvlab.Method: the registry as `kvlab methods` prints it, spec round trips,
bits per element, schedules and Method.apply against quantize on the scheduled ranges."""
import re

import numpy as np
import pytest

import kvlab


def cli_presets(cli, tokens=4096, head_dim=128):
    out = cli("methods", "--tokens", tokens, "--head-dim", head_dim).stdout
    bits = {m[0]: tuple(map(float, m[1:4]))
            for m in re.findall(r"^(\S+)\s+(\d+\.\d{3})\s+(\d+\.\d{3})\s+(\d+\.\d{3})\s", out, re.M)}
    specs = dict(re.findall(r"^  (\S+)\s+(\S+:\S+|fp16)$", out, re.M))
    return bits, specs


@pytest.mark.parametrize("tokens,head_dim", [(4096, 128), (300, 64)])
def test_presets_specs_and_bits_equal_the_cli(cli, tokens, head_dim):
    bits, specs = cli_presets(cli, tokens, head_dim)
    presets = kvlab.methods()
    assert [p["name"] for p in presets] == list(bits) == list(specs)
    for p in presets:
        m = kvlab.Method(p["name"])
        assert m.spec == p["spec"] == specs[p["name"]]
        b = m.bits(tokens=tokens, head_dim=head_dim)
        assert tuple(f"{v:.3f}" for v in (b["key"], b["value"], b["both"])) == \
            tuple(f"{v:.3f}" for v in bits[p["name"]]), p["name"]


def test_spec_round_trip_print_and_parse():
    for p in kvlab.methods():
        m = kvlab.Method(p["name"])
        assert kvlab.Method(str(m)) == m and hash(kvlab.Method(m.spec)) == hash(m)
        assert repr(m) == f"kvlab.Method({m.spec!r})" and m.family == p["family"]
    m = kvlab.Method("kitty:kbits=4,boost=0.5")
    assert m.spec.startswith("kitty:kbits=4,") and "boost=0.5" in m.spec
    assert kvlab.Method("kitty-pro") != kvlab.Method("kitty") and kvlab.Method("kitty") != "kitty"
    names = {f["name"] for f in kvlab.families()}
    assert {"fp16", "int8", "kivi", "kitty", "fp8", "vq"} <= names


def test_unknown_names_list_the_choices(cli):
    with pytest.raises(ValueError, match="kivi-2") as e:
        kvlab.Method("kivi-3")
    r = cli("eval", "--methods", "kivi-3", "--quiet", check=False)
    assert r.returncode == 1 and str(e.value) in r.stderr
    with pytest.raises(ValueError, match="kbits"):
        kvlab.Method("kivi:kbitz=2")


def test_apply_follows_the_schedule():
    rng = np.random.default_rng(3)
    k = rng.standard_normal((2, 300, 64)).astype(np.float16)
    v = rng.standard_normal((2, 300, 64)).astype(np.float16)
    for name in ("kivi-2", "kivi-2-sink", "kitty", "int8"):
        m = kvlab.Method(name)
        k_hat, v_hat = m.apply(k, v)
        assert k_hat.dtype == np.float32 and k_hat.shape == k.shape and v_hat.shape == v.shape
        s = m.schedule(300)
        for x, x_hat, (b, e), q in ((k, k_hat, s["key"], m.key_quantizer), (v, v_hat, s["value"], m.value_quantizer)):
            outside = np.ones(300, bool)
            outside[b:e] = False
            np.testing.assert_array_equal(x_hat[:, outside], x[:, outside].astype(np.float32))  # fp16 tokens kept
            want = kvlab.quantize(np.ascontiguousarray(x[:, b:e]), q).dequant()
            np.testing.assert_array_equal(x_hat[:, b:e], want, err_msg=f"{name}: quantized range")
    with pytest.raises(ValueError, match="shape"):
        kvlab.Method("kivi-2").apply(k, v[:, :200])
