"""The compiled module, with a clear message where it was not built."""
try:
    from . import _kvlab as ext  # noqa: F401
except ImportError as e:  # pragma: no cover - depends on the installation
    raise ImportError(
        f"kvlab's compiled module kvlab._kvlab could not be loaded ({e}); install the package with "
        "`pip install .` from the kvlab checkout, or build the CMake target _kvlab and put "
        "build/bindings/python on PYTHONPATH") from e
