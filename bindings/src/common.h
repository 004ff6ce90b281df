// What every binding file shares: array views in and out without copies, the GIL released
// around long calls with progress and Ctrl-C, and the exceptions (errors.cpp).
#pragma once
#include <pybind11/functional.h>
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "kvlab/codec.h"
#include "kvlab/evaluate.h"
#include "kvlab/tensor.h"

namespace py = pybind11;

namespace kvlab::bind {

// A C-contiguous float16/float32 buffer seen as a TensorView: the view points into the
// caller's memory (no copy) and stays valid while this object lives. Anything else (another
// dtype, strides, a read failure of the buffer protocol) throws std::invalid_argument naming
// `name`, its dtype or strides, and what to pass instead.
struct InputArray {
  py::buffer_info buffer;
  TensorView view;
};
InputArray input_array(const py::handle& x, const std::string& name);

// C-order byte strides of `shape` for items of `item` bytes. numpy arrays are always built
// with explicit strides: pybind11 2.10 reads the item size from numpy 1's descriptor layout.
std::vector<py::ssize_t> c_strides(const std::vector<int64_t>& shape, size_t item);

// A numpy array over `data`, memory that `owner` keeps alive (no copy).
template <class T>
py::array wrap(const std::vector<int64_t>& shape, const T* data, py::handle owner) {
  return py::array(py::dtype::of<T>(), std::vector<py::ssize_t>(shape.begin(), shape.end()),
                   c_strides(shape, sizeof(T)), data, owner);
}

// The same, read-only: a view into a result that other views share.
template <class T>
py::array view_of(const std::vector<int64_t>& shape, const T* data, py::handle owner) {
  py::array a = wrap(shape, data, owner);
  py::detail::array_proxy(a.ptr())->flags &= ~py::detail::npy_api::NPY_ARRAY_WRITEABLE_;
  return a;
}

// A new C-order numpy array of dtype `dtype` ("float32", "float16", "uint8", ...).
py::array new_array(const std::string& dtype, const std::vector<int64_t>& shape, size_t item);

// fp32 values as a float16 numpy array (each value rounded to nearest even; exact for fp16 values).
py::array half_array(const std::vector<float>& v, const std::vector<int64_t>& shape);

// A Tensor's data as a numpy float32 array that owns it (moved, not copied).
py::array tensor_array(Tensor&& t);

// Long calls: the GIL is released around `run`; `hook()` is handed to the C++ code as its
// progress callback and called after each unit (a layer). With the GIL held it checks for
// Ctrl-C (KeyboardInterrupt, raised once `run` returns) and calls the Python callback
// (done, total) when there is one. Python exceptions thrown there propagate.
class LongCall {
 public:
  explicit LongCall(py::object progress) : progress_(std::move(progress)) {}
  std::function<void(const EvalProgress&)> hook();
  void check() const;  // the Ctrl-C check alone (the dump loader calls it before each layer)

 private:
  py::object progress_;
};

// Where a method's quantize -> dequantize runs (kvlab/codec.h): null (core, on the CPU) for
// device < 0, else the GPU kernels on that CUDA device (one codec per device, kept). Builds
// without CUDA throw std::invalid_argument naming `device`.
std::shared_ptr<const Codec> device_codec(int device);

// Registered by the module: kvlab.FileError (OSError) and friends; C++ exceptions map to them.
void register_errors(py::module_& m);

// Parts of the module, one per file.
void bind_quantize(py::module_& m);
void bind_methods(py::module_& m);
void bind_dumps(py::module_& m);
void bind_studies(py::module_& m);
void bind_vq(py::module_& m);
void bind_gpu(py::module_& m);        // CUDA builds: gpu_quantize; has_gpu either way
void bind_attention(py::module_& m);  // CUDA builds: DecodeCache, DecodeRun (kvlab.gpu)

}  // namespace kvlab::bind
