// Run f() on a CUDA device without the GIL (builds with CUDA). The GPU library's failures
// ("kvlab-gpu: ..." runtime_error: a CUDA error, no device) become RuntimeError, not
// kvlab.FileError (errors.cpp's rule for other runtime_errors, which kvlab throws for files).
#pragma once
#if defined(KVLAB_PY_GPU)
#include <cuda_runtime.h>

#include <string>

#include "common.h"

namespace kvlab::bind {

template <class F>
auto on_device(int device, F&& f) {
  try {
    py::gil_scoped_release release;
    if (cudaSetDevice(device) != cudaSuccess)
      throw std::runtime_error("kvlab-gpu: cannot select CUDA device " + std::to_string(device));
    return f();
  } catch (const std::runtime_error& e) {
    if (std::string(e.what()).rfind("kvlab-gpu: ", 0) != 0) throw;
    PyErr_SetString(PyExc_RuntimeError, e.what());
    throw py::error_already_set();
  }
}

}  // namespace kvlab::bind
#endif
