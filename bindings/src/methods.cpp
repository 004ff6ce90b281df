// The method registry: families, presets, and one parsed method (spec, bits, schedule, apply).
#include "common.h"
#include "kvlab/decode_view.h"
#include "kvlab/method.h"

namespace kvlab::bind {
namespace {

py::dict preset_dict(const Preset& p, const std::string& family) {
  py::dict d;
  d["name"] = p.name;
  d["spec"] = p.spec;
  d["family"] = family;
  d["description"] = p.description;
  return d;
}

// A parsed method (immutable; shared with the registry's other users).
struct PyMethod {
  MethodPtr p;
};

// One head's context; pre-RoPE keys (kvquant), when given, are read in place through `pre`.
HeadContext head_context(int64_t layer, int64_t kv_head, const py::handle& k_pre_rope,
                         const std::string& rope_style, double rope_theta, InputArray& pre) {
  HeadContext at{layer, kv_head};
  if (k_pre_rope.is_none()) return at;
  pre = input_array(k_pre_rope, "k_pre_rope");
  at.k_pre_rope = pre.view;
  at.rope_style = parse_enum<RopeStyle>(rope_style, "rope_style");
  at.rope_theta = (float)rope_theta;
  return at;
}

}  // namespace

void bind_methods(py::module_& m) {
  m.def("families", [] {
    py::list out;
    for (const MethodFamily* f : method_families()) {
      py::dict d;
      d["name"] = f->name;
      d["summary"] = f->summary;
      py::list keys, presets;
      for (const auto& k : f->keys)
        keys.append(py::dict(py::arg("name") = k.name, py::arg("default") = k.default_value,
                             py::arg("meaning") = k.meaning));
      for (const auto& p : f->presets) presets.append(preset_dict(p, f->name));
      d["keys"] = keys;
      d["presets"] = presets;
      out.append(d);
    }
    return out;
  });
  m.def("presets", [] {
    py::list out;
    for (const MethodFamily* f : method_families())
      for (const auto& p : f->presets) out.append(preset_dict(p, f->name));
    return out;
  });

  py::class_<PyMethod>(m, "Method")
      .def(py::init([](const std::string& spec) { return PyMethod{parse_method(spec)}; }), py::arg("spec"))
      .def_property_readonly("family", [](const PyMethod& x) { return x.p->family(); })
      .def_property_readonly("spec", [](const PyMethod& x) { return x.p->spec(); })
      .def("__str__", [](const PyMethod& x) { return x.p->spec(); })
      .def("__repr__", [](const PyMethod& x) { return "kvlab.Method('" + x.p->spec() + "')"; })
      .def(
          "__eq__", [](const PyMethod& a, const PyMethod& b) { return *a.p == *b.p; }, py::is_operator())
      .def("__hash__", [](const PyMethod& x) { return py::hash(py::str(x.p->spec())); })
      .def(
          "bits",
          [](const PyMethod& x, int64_t tokens, int64_t head_dim) {
            const Bits b = x.p->bits(tokens, head_dim);
            return py::dict(py::arg("key") = b.key, py::arg("value") = b.value, py::arg("both") = b.both());
          },
          py::arg("tokens"), py::arg("head_dim"))
      .def(
          "schedule",
          [](const PyMethod& x, int64_t tokens) {
            const Schedule s = x.p->schedule(tokens);
            return py::dict(py::arg("key") = py::make_tuple(s.key_begin, s.key_end),
                            py::arg("value") = py::make_tuple(s.value_begin, s.value_end));
          },
          py::arg("tokens"))
      .def_property_readonly("key_quantizer",
                             [](const PyMethod& x) -> py::object {
                               auto q = x.p->key_quantizer();
                               return q ? py::object(py::str(to_string(*q))) : py::none();
                             })
      .def_property_readonly("value_quantizer",
                             [](const PyMethod& x) -> py::object {
                               auto q = x.p->value_quantizer();
                               return q ? py::object(py::str(to_string(*q))) : py::none();
                             })
      .def(
          "apply",
          [](const PyMethod& x, py::handle k, py::handle v, int64_t layer, int64_t kv_head) {
            InputArray ki = input_array(k, "k"), vi = input_array(v, "v");
            Reconstruction r;
            {
              py::gil_scoped_release release;
              r = x.p->apply(ki.view, vi.view, {layer, kv_head});
            }
            return py::make_tuple(tensor_array(std::move(r.k)), tensor_array(std::move(r.v)));
          },
          py::arg("k"), py::arg("v"), py::arg("layer") = 0, py::arg("kv_head") = 0)
      .def(
          "check_model",
          [](const PyMethod& x, int64_t num_layers, int64_t num_kv_heads, int64_t head_dim) {
            x.p->check_model({num_layers, num_kv_heads, head_dim});
          },
          py::arg("num_layers"), py::arg("num_kv_heads"), py::arg("head_dim"))
      // Decoding (kvlab/decode_view.h): the streaming rule the simulations in kvlab ppl and kvlab.hf share.
      .def("check_decodable", [](const PyMethod& x) { check_decodable(*x.p); })
      .def_property_readonly("needs_k_pre_rope", [](const PyMethod& x) { return x.p->needs_k_pre_rope(); })
      .def(
          "head_method",
          [](const PyMethod& x, int64_t layer, int64_t kv_head) {
            // the method serving (layer, kv_head), sharing ownership with the whole (a plan)
            return PyMethod{MethodPtr(x.p, &head_method(*x.p, layer, kv_head))};
          },
          py::arg("layer"), py::arg("kv_head"))
      .def(
          "decode_schedules",
          [](const PyMethod& x, int64_t tokens) {
            // decode_schedule(t + 1) for t < tokens, as rows (key begin, key end, value begin, value end).
            py::array_t<int64_t> out({tokens, int64_t{4}});
            auto r = out.mutable_unchecked<2>();
            for (int64_t t = 0; t < tokens; ++t) {
              const Schedule s = x.p->decode_schedule(t + 1);
              r(t, 0) = s.key_begin, r(t, 1) = s.key_end, r(t, 2) = s.value_begin, r(t, 3) = s.value_end;
            }
            return out;
          },
          py::arg("tokens"))
      .def(
          "decode_final",
          [](const PyMethod& x, py::handle k, py::handle v, int64_t layer, int64_t kv_head,
             py::handle k_pre_rope, const std::string& rope_style, double rope_theta, int device) {
            InputArray ki = input_array(k, "k"), vi = input_array(v, "v");
            InputArray pi;
            HeadContext at = head_context(layer, kv_head, k_pre_rope, rope_style, rope_theta, pi);
            const std::shared_ptr<const Codec> codec = device_codec(device);
            at.codec = codec.get();
            Reconstruction r;
            {
              py::gil_scoped_release release;
              r = decode_final(*x.p, ki.view, vi.view, at);
            }
            return py::make_tuple(tensor_array(std::move(r.k)), tensor_array(std::move(r.v)));
          },
          py::arg("k"), py::arg("v"), py::arg("layer") = 0, py::arg("kv_head") = 0,
          py::arg("k_pre_rope") = py::none(), py::arg("rope_style") = "none", py::arg("rope_theta") = 10000.0,
          py::arg("device") = -1)
      .def(
          "decode_view",
          [](const PyMethod& x, py::handle k, py::handle v, int64_t t, int64_t layer, int64_t kv_head,
             py::handle k_pre_rope, const std::string& rope_style, double rope_theta) {
            InputArray ki = input_array(k, "k"), vi = input_array(v, "v");
            InputArray pi;
            const HeadContext at = head_context(layer, kv_head, k_pre_rope, rope_style, rope_theta, pi);
            Reconstruction r;
            {
              py::gil_scoped_release release;
              r = decode_view(*x.p, ki.view, vi.view, t, at);
            }
            return py::make_tuple(tensor_array(std::move(r.k)), tensor_array(std::move(r.v)));
          },
          py::arg("k"), py::arg("v"), py::arg("t"), py::arg("layer") = 0, py::arg("kv_head") = 0,
          py::arg("k_pre_rope") = py::none(), py::arg("rope_style") = "none",
          py::arg("rope_theta") = 10000.0);
}

}  // namespace kvlab::bind
