"""CUDA tensors through the GPU kernels: the same bytes as the CPU path for the presets'
quantizers and other specs, and the CPU path's messages for bad tensors. Skipped without a
CUDA device or on a build without CUDA (kvlab.has_gpu())."""
import numpy as np
import pytest

import kvlab
from kvlab._ext import ext

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("no CUDA device", allow_module_level=True)
if not kvlab.has_gpu():
    pytest.skip("this kvlab build has no CUDA (configure with nvcc on PATH)", allow_module_level=True)

SPECS = sorted({q for p in kvlab.methods() for q in (kvlab.Method(p["name"]).key_quantizer,
                                                     kvlab.Method(p["name"]).value_quantizer) if q} |
               {"bits=2,axis=channel,group=128,params=fp32", "bits=4,axis=token,group=32",
                "bits=2,axis=channel,group=64,boost=0.25,params=fp32"})


@pytest.mark.parametrize("spec", SPECS)
@pytest.mark.parametrize("dtype", ["float16", "float32"])
def test_cuda_tensors_give_the_cpu_bytes(spec, dtype):
    x = torch.randn((2, 4, 700, 128), generator=torch.Generator().manual_seed(2)).to(getattr(torch, dtype))
    x[..., 5] *= 12
    try:
        cpu = kvlab.quantize(x, spec)
    except ValueError as e:  # a spec the CPU refuses for this input must be refused alike
        with pytest.raises(ValueError):
            kvlab.quantize(x.cuda(), spec)
        pytest.skip(f"both refuse: {e}")
    gpu = kvlab.quantize(x.cuda(), spec)
    for name in ("codes", "scale", "zero", "high", "boost_index"):
        a, b = getattr(cpu, name), getattr(gpu, name)
        assert (a is None) == (b is None), name
        if a is not None:
            assert a.shape == b.shape and a.dtype == b.dtype and a.tobytes() == b.tobytes(), f"{spec}: {name}"
    np.testing.assert_array_equal(gpu.dequant(), cpu.dequant())


def test_bad_cuda_tensors_get_the_cpu_messages():
    x = torch.randn((2, 300, 64))
    x[1, 7, 3] = float("nan")
    with pytest.raises(ValueError) as cpu:
        kvlab.quantize(x, "bits=2")
    with pytest.raises(ValueError) as gpu:
        kvlab.quantize(x.cuda(), "bits=2")
    assert str(gpu.value) == str(cpu.value)
    with pytest.raises(ValueError, match="not C-contiguous"):
        kvlab.quantize(torch.randn((2, 64, 300), device="cuda").transpose(1, 2), "bits=2")
    with pytest.raises(ValueError, match="group"):
        kvlab.quantize(torch.randn((2, 50, 64), device="cuda"), "bits=2,axis=channel,group=128")
    with pytest.warns(kvlab.CopyWarning, match="bfloat16"):
        kvlab.quantize(torch.randn((2, 300, 64), device="cuda").bfloat16(), "bits=2")


def test_cuda_failures_are_runtime_errors_not_file_errors():
    # A device that does not exist: the GPU library's error, as RuntimeError (kvlab.FileError is
    # for files).
    x = torch.randn((2, 64, 64), device="cuda")
    with pytest.raises(RuntimeError, match="cannot select CUDA device 4095") as e:
        ext.gpu_quantize(x.data_ptr(), "float32", list(x.shape), "bits=2", 4095)
    assert not isinstance(e.value, kvlab.FileError)
