"""Inputs: numpy arrays, torch tensors, DLPack and array-protocol objects, without copies
where the layout allows. The C++ side reads C-contiguous float16/float32 memory in place;
these are the only conversions, each announced with a CopyWarning:

- bfloat16 (torch, or numpy through ml_dtypes) is widened to float32 (exact),
- a list or tuple becomes a float32 array.

A torch tensor is read through ``tensor.numpy()`` (shared memory; ``detach()`` first, no copy).
Wrong dtypes, non-contiguous arrays and CUDA tensors raise ValueError.
"""
import sys
import warnings

import numpy as np


class CopyWarning(UserWarning):
    """kvlab copied an input instead of reading it in place (see kvlab._inputs)."""


def _copied(name, what, stacklevel):
    warnings.warn(f"{name}: {what} (a copy)", CopyWarning, stacklevel=stacklevel + 1)


def as_array(x, name, stacklevel=3):
    """x as something the buffer protocol reads without a copy (numpy array)."""
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(x, torch.Tensor):
        if x.device.type != "cpu":
            raise ValueError(f"{name}: a tensor on {x.device}; only kvlab.quantize takes CUDA tensors (on builds "
                             f"with CUDA); pass {name}.cpu()")
        x = x.detach()
        if x.dtype == torch.bfloat16:
            _copied(name, "bfloat16 widened to float32", stacklevel)
            x = x.float()
        if x.dtype not in (torch.float16, torch.float32):
            raise ValueError(f"{name}: dtype {x.dtype} is not supported; pass float16, bfloat16 or float32")
        return x.numpy()
    if isinstance(x, (list, tuple)):
        _copied(name, "list converted to a float32 array", stacklevel)
        return np.asarray(x, dtype=np.float32)
    if not isinstance(x, np.ndarray):
        if hasattr(x, "__dlpack__"):
            x = np.from_dlpack(x)
        elif hasattr(x, "__array_interface__") or hasattr(x, "__array__"):
            x = np.asarray(x)
    if isinstance(x, np.ndarray) and x.dtype.name == "bfloat16":
        _copied(name, "bfloat16 widened to float32", stacklevel)
        return x.astype(np.float32)
    return x
