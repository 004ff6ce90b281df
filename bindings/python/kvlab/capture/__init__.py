"""kvlab.capture: dump a Hugging Face transformers model's q, k, v into the kvlab HDF5 format.

    from kvlab.capture import capture
    capture(model, input_ids, "dump.h5", text=prompt)

or from the shell: python3 -m kvlab.capture --model ID_OR_DIR --prompt TEXT --out dump.h5
(docs/DUMP_FORMAT.md, "Capturing a Hugging Face model").
"""
from .writer import DumpWriter  # noqa: F401  (numpy + h5py only)


def capture(*args, **kwargs):
    # imported on use so that the writer works without torch/transformers installed
    from .hook import capture as _capture
    return _capture(*args, **kwargs)


capture.__doc__ = "See kvlab.capture.hook.capture."
