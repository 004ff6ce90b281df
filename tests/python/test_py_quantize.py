"""kvlab.quantize against `kvlab quantize`: the same bytes, dtypes and shapes for every
preset's key and value quantizers and other specs; inputs read in place; bad inputs named."""
import numpy as np
import pytest

import kvlab
from kvlab._ext import ext

EXTRA_SPECS = [
    "bits=2,axis=channel,group=128",
    "bits=3,axis=token,group=32,params=fp32",
    "scheme=sym,bits=8,axis=channel,group=all",
    "bits=2,axis=channel,group=64,boost=0.25",
    "bits=4,axis=token,group=all,profile=kivi",
    "bits=2,axis=channel,group=128,boost=0.125,profile=kitty-sim",
    "bits=1,axis=channel,group=100",
]


def preset_quantizers():
    specs = []
    for p in kvlab.methods():
        m = kvlab.Method(p["name"])
        for q in (m.key_quantizer, m.value_quantizer):
            if q is not None and q not in specs:
                specs.append(q)
    return specs


def data(shape=(2, 300, 64), dtype=np.float16, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(shape).astype(np.float32)
    x[..., 3] *= 9  # an outlier channel, as keys have
    return x.astype(dtype)


@pytest.mark.parametrize("spec", preset_quantizers() + EXTRA_SPECS)
@pytest.mark.parametrize("dtype", [np.float16, np.float32])
def test_bytes_equal_the_cli(tmp_path, cli, spec, dtype):
    x = data(dtype=dtype)
    np.save(tmp_path / "x.npy", x)
    cli("quantize", "--input", tmp_path / "x.npy", "--quantizer", spec, "--out", tmp_path / "q.npz")
    ref = dict(np.load(tmp_path / "q.npz"))
    q = kvlab.quantize(x, spec)
    got = {"q": q.unpack(), "dequant": q.dequant(), "codes": q.codes, "scale": q.scale, "zero": q.zero,
           "high": q.high, "boost_index": q.boost_index}
    got = {k: v for k, v in got.items() if v is not None}
    assert sorted(got) == sorted(ref)
    for name, want in ref.items():
        assert got[name].dtype == want.dtype and got[name].shape == want.shape, name
        assert got[name].tobytes() == want.tobytes(), f"{spec}: {name} differs"
    assert q.spec == kvlab.canonical_quantizer(spec) and q.shape == x.shape


def test_every_preset_has_quantizers_tested():
    assert len(preset_quantizers()) >= 6  # kivi, kitty (boost), int8 (sym) key and value quantizers


def test_input_read_in_place_and_parts_are_views():
    x = data()
    assert ext._input_address(x) == x.__array_interface__["data"][0]
    view = x[1]  # a contiguous slice of a bigger array: still no copy
    assert ext._input_address(view) == view.__array_interface__["data"][0]
    q = kvlab.quantize(x, "bits=2,axis=channel,group=128")
    for part in (q.codes, q.scale, q.zero):
        assert not part.flags.owndata and not part.flags.writeable
    assert q.codes.__array_interface__["data"][0] == q.codes.__array_interface__["data"][0]
    first = q.codes
    assert np.shares_memory(first, q.codes)  # the same memory every time: no copy per access
    del q
    assert first.sum() >= 0  # the view keeps the result alive
    np.testing.assert_array_equal(kvlab.quantize(memoryview(x), "bits=2").codes,
                                  kvlab.quantize(x, "bits=2").codes)


def test_dequant_float16_is_rounded_float32():
    q = kvlab.quantize(data(), "bits=3,axis=token,group=32")
    assert q.dequant("float16").tobytes() == q.dequant().astype(np.float16).tobytes()
    with pytest.raises(ValueError, match="float64"):
        q.dequant("float64")


def test_bad_inputs_are_named():
    with pytest.raises(ValueError, match=r"x: dtype float64 is not supported"):
        kvlab.quantize(np.zeros((4, 8)), "bits=2")
    with pytest.raises(ValueError, match=r"x: dtype int32"):
        kvlab.quantize(np.zeros((4, 8), np.int32), "bits=2")
    with pytest.raises(ValueError, match=r"not C-contiguous .*ascontiguousarray"):
        kvlab.quantize(data()[:, :, ::2], "bits=2")
    with pytest.raises(ValueError, match=r"not C-contiguous"):
        kvlab.quantize(data()[0].T, "bits=2")
    with pytest.raises(ValueError, match=r"x: a str is not an array"):
        kvlab.quantize("abc", "bits=2")
    with pytest.raises(ValueError, match=r"bits"):
        kvlab.quantize(data(), "bits=9")
    with pytest.raises(ValueError, match=r"group"):
        kvlab.quantize(data((2, 50, 64)), "bits=2,axis=channel,group=128")
    x = data((4, 8), np.float32)
    x[1, 2] = np.nan
    with pytest.raises(ValueError, match=r"NaN|Inf|finite"):
        kvlab.quantize(x, "bits=2")
    with pytest.warns(kvlab.CopyWarning, match="list"):
        kvlab.quantize([[1.0, 2.0], [3.0, 4.0]], "bits=2")


def test_error_messages_equal_the_cli(tmp_path, cli):
    x = data((2, 50, 64), np.float32)
    np.save(tmp_path / "x.npy", x)
    spec = "bits=2,axis=channel,group=128"
    r = cli("quantize", "--input", tmp_path / "x.npy", "--quantizer", spec, "--out", tmp_path / "q.npz", check=False)
    assert r.returncode == 1
    with pytest.raises(ValueError) as e:
        kvlab.quantize(x, spec)
    assert r.stderr.strip() == f"kvlab: error: {e.value}"


def test_boost_channels_chosen_by_the_caller():
    x = data((1, 256, 64))
    q = kvlab.quantize(x, "bits=2,axis=channel,group=128,boost=0.125")
    chosen = kvlab.quantize(x, "bits=2,axis=channel,group=128,boost=0.125",
                            boost_channels=[c for c in range(8)] * 2)
    assert q.boost_k == 8 and chosen.boost_index.shape == (1, 2, 64)
    assert list(np.flatnonzero(chosen.boost_index[0, 0] != 255)) == list(range(8))
    with pytest.raises(ValueError, match="boost"):
        kvlab.quantize(x, "bits=2,axis=channel,group=128,boost=0.125", boost_channels=[0, 1])
