// Arrays in (buffer protocol, no copy) and out (numpy arrays over kvlab's own memory).
#include <stdexcept>

#include "common.h"
#include "kvlab/half.h"

namespace kvlab::bind {
namespace {

// The numpy name of a buffer-protocol format, for error messages.
std::string dtype_name(const py::buffer_info& b) {
  const std::string f = b.format.empty() ? "" : b.format.substr(b.format.find_first_not_of("@=<>!"));
  if (f == "e") return "float16";
  if (f == "f") return "float32";
  if (f == "d") return "float64";
  if (f == "?") return "bool";
  if (f.size() == 1 && std::string("bhilqBHILQ").find(f) != std::string::npos)
    return std::string(std::islower(f[0]) ? "int" : "uint") + std::to_string(8 * b.itemsize);
  return "format '" + b.format + "'";
}

}  // namespace

InputArray input_array(const py::handle& x, const std::string& name) {
  auto* raw = new Py_buffer();  // buffer_info owns it: releases and deletes it
  if (PyObject_GetBuffer(x.ptr(), raw, PyBUF_STRIDES | PyBUF_FORMAT) != 0) {
    delete raw;
    PyErr_Clear();
    throw std::invalid_argument(name + ": a " + std::string(Py_TYPE(x.ptr())->tp_name) +
                                " is not an array (pass a numpy array or a torch tensor)");
  }
  InputArray in{py::buffer_info(raw), {}};
  const py::buffer_info& b = in.buffer;
  const std::string dt = dtype_name(b);
  if (dt != "float16" && dt != "float32")
    throw std::invalid_argument(name + ": dtype " + dt +
                                " is not supported; pass float16, bfloat16 or float32");
  std::vector<int64_t> shape(b.shape.begin(), b.shape.end());
  int64_t expect = b.itemsize;
  for (size_t i = shape.size(); i-- > 0;) {
    if (shape[i] > 1 && b.strides[i] != expect)
      throw std::invalid_argument(name + ": array of shape " + shape_string(shape) +
                                  " is not C-contiguous (strides " +
                                  shape_string(std::vector<int64_t>(b.strides.begin(), b.strides.end())) +
                                  " bytes); pass numpy.ascontiguousarray(x) or x.contiguous()");
    expect *= shape[i];
  }
  in.view = {b.ptr, dt == "float16" ? DType::F16 : DType::F32, std::move(shape)};
  return in;
}

std::vector<py::ssize_t> c_strides(const std::vector<int64_t>& shape, size_t item) {
  std::vector<py::ssize_t> s(shape.size());
  py::ssize_t step = (py::ssize_t)item;
  for (size_t i = shape.size(); i-- > 0;) {
    s[i] = step;
    step *= (py::ssize_t)shape[i];
  }
  return s;
}

py::array new_array(const std::string& dtype, const std::vector<int64_t>& shape, size_t item) {
  return py::array(py::dtype(dtype), std::vector<py::ssize_t>(shape.begin(), shape.end()),
                   c_strides(shape, item));
}

py::array half_array(const std::vector<float>& v, const std::vector<int64_t>& shape) {
  py::array a = new_array("float16", shape, 2);
  auto* out = static_cast<uint16_t*>(a.mutable_data());
  for (size_t i = 0; i < v.size(); ++i) out[i] = float_to_half(v[i]);
  return a;
}

py::array tensor_array(Tensor&& t) {
  auto* owned = new Tensor(std::move(t));
  py::capsule owner(owned, [](void* p) { delete static_cast<Tensor*>(p); });
  return wrap(owned->shape, owned->data.data(), owner);
}

}  // namespace kvlab::bind
