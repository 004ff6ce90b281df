"""kvlab for Python: KV-cache quantization research on numpy arrays and torch tensors.

The same C++ libraries as the ``kvlab`` command line (no second implementation), so every
byte and number equals the CLI's::

    import kvlab
    kvlab.methods()                                  # presets: name, spec, family, description
    q = kvlab.quantize(x, "bits=2,axis=channel,group=128")   # x: numpy array or torch tensor
    q.codes, q.scale, q.zero, q.dequant()
    m = kvlab.Method("kitty-pro"); k_hat, v_hat = m.apply(k, v)
    d = kvlab.open_dump("dump.h5"); d.read(0, "k", head=1)
    kvlab.evaluate(d, methods=["kivi-2", "kitty"], queries="last:64")   # eval's JSON as dicts

The compiled module (kvlab._kvlab) is loaded on first use, so kvlab.capture (the Hugging Face
hook, numpy + h5py + torch only) works where the extension is not built. docs/PYTHON.md has a
walk-through.
"""
import importlib

__all__ = [
    "CopyWarning", "Dump", "DumpWriter", "FileError", "Method", "MissingFileError", "Quantized",
    "boost_sweep", "canonical_quantizer", "default_dump_path", "default_eval_dump", "evaluate", "families", "has_gpu", "kmeans", "methods", "open_dump",
    "quantize", "sensitivity", "synthetic", "vq",
]
_SUBMODULES = {"vq", "capture", "hf", "gpu"}


def __getattr__(name):
    if name in _SUBMODULES:
        return importlib.import_module(f".{name}", __name__)
    if name in __all__:
        from . import _api
        return getattr(_api, name)
    raise AttributeError(f"module 'kvlab' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(__all__) | _SUBMODULES)
