"""torch tensors in: fp16/fp32 read in place (the same bytes as numpy), bf16 widened with a
CopyWarning, non-contiguous and non-CPU tensors refused; DLPack objects. Skipped without torch.
The GPU part (CUDA tensors through the GPU kernels) is not built yet: a CUDA tensor is refused."""
import numpy as np
import pytest

import kvlab
from kvlab._ext import ext
from kvlab._inputs import as_array

torch = pytest.importorskip("torch")
SPEC = "bits=2,axis=channel,group=64,boost=0.25"


def tensor(dtype, shape=(2, 200, 32)):
    return torch.randn(shape, generator=torch.Generator().manual_seed(0)).to(dtype)


@pytest.mark.parametrize("dtype", ["float16", "float32"])
def test_tensors_are_read_in_place_with_numpys_bytes(dtype):
    t = tensor(getattr(torch, dtype))
    assert ext._input_address(as_array(t, "x")) == t.data_ptr()
    a, b = kvlab.quantize(t, SPEC), kvlab.quantize(t.numpy(), SPEC)
    for name in ("codes", "high", "boost_index", "scale", "zero"):
        assert getattr(a, name).tobytes() == getattr(b, name).tobytes(), name
    g = tensor(torch.float32).requires_grad_()
    assert kvlab.quantize(g, SPEC).codes.tobytes() == kvlab.quantize(g.detach().numpy(), SPEC).codes.tobytes()


def test_bfloat16_is_widened_with_a_warning():
    t = tensor(torch.bfloat16)
    with pytest.warns(kvlab.CopyWarning, match="bfloat16 widened to float32"):
        q = kvlab.quantize(t, SPEC)
    assert q.codes.tobytes() == kvlab.quantize(t.float().numpy(), SPEC).codes.tobytes()


def test_dlpack_objects():
    t = tensor(torch.float16)

    class OnlyDLPack:  # exposes nothing but the DLPack protocol
        def __dlpack__(self, **kw):
            return t.__dlpack__(**kw)

        def __dlpack_device__(self):
            return t.__dlpack_device__()
    assert kvlab.quantize(OnlyDLPack(), SPEC).codes.tobytes() == kvlab.quantize(t, SPEC).codes.tobytes()


def test_bad_tensors_are_refused():
    with pytest.raises(ValueError, match="not C-contiguous"):
        kvlab.quantize(tensor(torch.float32).transpose(1, 2), SPEC)
    with pytest.raises(ValueError, match="dtype torch.int64"):
        kvlab.quantize(torch.zeros((4, 64), dtype=torch.int64), SPEC)
    with pytest.raises(ValueError, match=r"tensor on meta.*cpu\(\)"):  # any non-CPU device, CUDA included
        kvlab.quantize(torch.empty((2, 200, 32), device="meta"), SPEC)


def test_method_apply_and_writer_take_tensors(tmp_path):
    k, v = tensor(torch.float16, (2, 300, 32)), tensor(torch.float16, (2, 300, 32))
    m = kvlab.Method("kitty")
    for a, b in zip(m.apply(k, v), m.apply(k.numpy(), v.numpy())):
        np.testing.assert_array_equal(a, b)
    with kvlab.DumpWriter(tmp_path / "t.h5", model="t", num_layers=1, num_q_heads=2, num_kv_heads=2, head_dim=32,
                          tokens=300, dtype="bfloat16") as w:
        for role in "qkv":
            w.write(0, role, k)
    np.testing.assert_array_equal(kvlab.open_dump(tmp_path / "t.h5").read(0, "k"),
                                  k.to(torch.bfloat16).float().numpy())
