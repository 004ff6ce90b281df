"""CUDA tensors in kvlab.quantize: on a build with CUDA, through the GPU kernels (the same bytes
as the CPU); the tensor is checked here (dtype, contiguity, finite values, with the CPU path's
messages) because the kernels read it only on the device."""
import sys
import warnings

from ._ext import ext
from ._inputs import CopyWarning


def is_device_tensor(x):
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(x, torch.Tensor) and x.device.type != "cpu"


def quantize(x, spec, boost_channels):
    torch = sys.modules["torch"]
    if x.device.type != "cuda" or not getattr(ext, "has_gpu", False):
        raise ValueError(f"x: a tensor on {x.device}; this kvlab build has no GPU path for it (pass x.cpu())")
    if boost_channels is not None:
        raise ValueError("boost_channels: not supported for CUDA tensors (pass x.cpu())")
    x = x.detach()
    if x.dtype == torch.bfloat16:
        warnings.warn("x: bfloat16 widened to float32 (a copy)", CopyWarning, stacklevel=3)
        x = x.float()
    if x.dtype not in (torch.float16, torch.float32):
        raise ValueError(f"x: dtype {x.dtype} is not supported; pass float16, bfloat16 or float32")
    shape = tuple(x.shape)
    if not x.is_contiguous():
        raise ValueError(f"x: array of shape {shape} is not C-contiguous; pass x.contiguous()")
    bad = (~torch.isfinite(x)).reshape(-1).nonzero()
    if len(bad):
        i = int(bad[0])
        shown = "(" + ", ".join(map(str, shape)) + ")"
        raise ValueError(f"quantize: input of shape {shown} holds a non-finite value "
                         f"({float(x.reshape(-1)[i]):f}) at flat index {i}; quantization needs finite input")
    with torch.cuda.device(x.device):
        torch.cuda.current_stream().synchronize()  # the kernels run on the legacy default stream
        return ext.gpu_quantize(x.data_ptr(), "float16" if x.dtype == torch.float16 else "float32", list(shape),
                                str(spec), x.device.index)
