// kvlab.quantize: core's quantize on the caller's memory; the parts come back as numpy views
// of the result (no copy), shaped as `kvlab quantize` writes them into its .npz.
#include <memory>

#include "common.h"
#include "kvlab/quantizer.h"
#include "quantized.h"

namespace kvlab::bind {
namespace {

py::object part(py::object self, const std::vector<uint8_t> QuantizedTensor::*member,
                const std::vector<int64_t> PartShapes::*shape) {
  const Quantized& r = self.cast<const Quantized&>();
  if ((r.q.*member).empty()) return py::none();
  return view_of(r.shapes.*shape, (r.q.*member).data(), self);
}

// Scales and zeros in their storage type: fp32 values are viewed, fp16 ones converted (the
// result holds them as fp32, each exactly an fp16 value).
py::object params(py::object self, const std::vector<float> QuantizedTensor::*member) {
  const Quantized& r = self.cast<const Quantized&>();
  const std::vector<float>& v = r.q.*member;
  if (v.empty()) return py::none();
  if (r.q.spec.params == ParamType::F16) return half_array(v, r.shapes.params);
  return view_of(r.shapes.params, v.data(), self);
}

}  // namespace

void bind_quantize(py::module_& m) {
  py::class_<Quantized>(m, "Quantized")
      .def_property_readonly("spec", [](const Quantized& r) { return to_string(r.q.spec); })
      .def_property_readonly("shape", [](const Quantized& r) { return py::tuple(py::cast(r.q.shape)); })
      .def_property_readonly("group", [](const Quantized& r) { return r.q.group; })
      .def_property_readonly("boost_k", [](const Quantized& r) { return r.q.boost_k; })
      .def_property_readonly("bits_per_element", [](const Quantized& r) { return bits_per_element(r.q); })
      .def_property_readonly(
          "codes", [](py::object s) { return part(s, &QuantizedTensor::codes, &PartShapes::codes); })
      .def_property_readonly("high",
                             [](py::object s) { return part(s, &QuantizedTensor::high, &PartShapes::high); })
      .def_property_readonly(
          "boost_index",
          [](py::object s) { return part(s, &QuantizedTensor::boost_index, &PartShapes::boost_index); })
      .def_property_readonly("scale", [](py::object s) { return params(s, &QuantizedTensor::scale); })
      .def_property_readonly("zero", [](py::object s) { return params(s, &QuantizedTensor::zero); })
      .def(
          "dequant",
          [](const Quantized& r, const std::string& dtype) {
            if (dtype != "float32" && dtype != "float16")
              throw std::invalid_argument("dequant: dtype '" + dtype + "' is not float32 or float16");
            const bool half = dtype == "float16";
            py::array out = new_array(dtype, r.q.shape, half ? 2 : 4);
            void* dst = out.mutable_data();
            py::gil_scoped_release release;
            if (half)
              dequantize_half(r.q, static_cast<uint16_t*>(dst));
            else
              dequantize(r.q, static_cast<float*>(dst));
            return out;
          },
          py::arg("dtype") = "float32")
      .def("unpack", [](const Quantized& r) {
        std::vector<uint8_t> codes;
        {
          py::gil_scoped_release release;
          codes = unpack_codes(r.q);
        }
        py::array out = new_array("uint8", r.q.shape, 1);
        std::copy(codes.begin(), codes.end(), static_cast<uint8_t*>(out.mutable_data()));
        return out;
      });

  m.def(
      "quantize",
      [](py::handle x, const std::string& spec_text, std::optional<std::vector<int32_t>> boost_channels) {
        const QuantizerSpec spec = parse_quantizer(spec_text);
        InputArray in = input_array(x, "x");
        auto r = std::make_unique<Quantized>();
        {
          py::gil_scoped_release release;
          r->q = boost_channels ? quantize(in.view, spec, *boost_channels) : quantize(in.view, spec);
          r->shapes = part_shapes(r->q);
        }
        return r;
      },
      py::arg("x"), py::arg("spec"), py::arg("boost_channels") = py::none());
  m.def("_input_address", [](py::handle x) { return (uintptr_t)input_array(x, "x").view.data; });
  m.def("canonical_quantizer", [](const std::string& text) { return to_string(parse_quantizer(text)); });
}

}  // namespace kvlab::bind
