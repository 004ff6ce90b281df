// Dumps: every reader kvlab has (open_dump), the synthetic generator, and the HDF5 writer.
// Reads are lazy, one layer or one head at a time, with the GIL released.
#include <filesystem>
#include <memory>

#include "common.h"
#include "dumps.h"
#include "errors.h"
#include "kvlab/reference_dump.h"
#include "kvlab/synthetic_dump.h"

namespace kvlab::bind {
namespace {

py::dict info_dict(const DumpInfo& i) {
  py::dict d;
  d["model"] = i.model;
  d["num_layers"] = i.num_layers;
  d["num_q_heads"] = i.num_q_heads;
  d["num_kv_heads"] = i.num_kv_heads;
  d["head_dim"] = i.head_dim;
  d["tokens"] = i.tokens;
  d["rope_theta"] = i.rope_theta;
  d["rope_style"] = to_string(i.rope_style);
  d["k_after_rope"] = i.k_after_rope;
  d["has_k_pre_rope"] = i.has_k_pre_rope;
  d["dtype"] = to_string(i.dtype);
  d["token_ids"] = i.token_ids;
  d["text"] = i.text;
  d["source"] = i.source;
  return d;
}

std::shared_ptr<PyDump> open(const std::string& path) {
  try {
    return std::make_shared<PyDump>(PyDump{open_dump(path)});
  } catch (const std::runtime_error& e) {
    std::error_code ec;
    if (!std::filesystem::exists(path, ec)) throw MissingFile(e.what());
    throw;
  }
}

// Keeps the temporary file until commit; dropping it uncommitted deletes the file.
struct PyDumpWriter {
  std::unique_ptr<DumpWriter> w;
  DumpInfo info;
  DumpWriter& get() {
    if (!w) throw std::invalid_argument("DumpWriter: already committed or discarded");
    return *w;
  }
};

}  // namespace

void bind_dumps(py::module_& m) {
  py::class_<PyDump, std::shared_ptr<PyDump>>(m, "Dump")
      .def_property_readonly("path", [](const PyDump& d) { return d.reader->path(); })
      .def_property_readonly("info", [](const PyDump& d) { return info_dict(d.reader->info()); })
      .def(
          "read",
          [](const PyDump& d, int64_t layer, const std::string& role, std::optional<int64_t> head) {
            const Role r = parse_role(role);
            Tensor t;
            {
              py::gil_scoped_release release;
              t = head ? d.reader->read_head(layer, r, *head) : d.reader->read(layer, r);
            }
            return tensor_array(std::move(t));
          },
          py::arg("layer"), py::arg("role"), py::arg("head") = py::none());

  m.def("open_dump", &open, py::arg("path"));
  m.def("default_dump_path", &default_dump_path);
  m.def(
      "default_eval_dump",
      [](const std::string& cache_dir) {
        ReferenceDumpOptions o;
        o.cache_dir = cache_dir;
        return default_eval_dump(o);
      },
      py::arg("cache_dir"), py::call_guard<py::gil_scoped_release>());
  m.def(
      "synthetic",
      [](const std::string& preset, std::optional<int64_t> tokens, std::optional<int64_t> layers,
         uint64_t seed, bool k_pre_rope) {
        SyntheticDumpParams p = synthetic_preset(preset);
        if (tokens) p.tokens = *tokens;
        if (layers) p.layers = *layers;
        p.seed = seed;
        p.k_pre_rope = k_pre_rope;
        return std::make_shared<PyDump>(PyDump{std::make_unique<SyntheticDump>(p)});
      },
      py::arg("preset"), py::arg("tokens") = py::none(), py::arg("layers") = py::none(), py::arg("seed") = 0,
      py::arg("k_pre_rope") = false);

  py::class_<PyDumpWriter>(m, "DumpWriter")
      .def(py::init([](const std::string& path, const std::string& model, int64_t num_layers,
                       int64_t num_q_heads, int64_t num_kv_heads, int64_t head_dim, int64_t tokens,
                       double rope_theta, const std::string& rope_style, bool k_after_rope, bool k_pre_rope,
                       const std::string& dtype, std::vector<int32_t> token_ids, const std::string& text,
                       const std::string& source, bool compress, int64_t chunk_tokens) {
             DumpInfo i;
             i.model = model;
             i.num_layers = num_layers;
             i.num_q_heads = num_q_heads;
             i.num_kv_heads = num_kv_heads;
             i.head_dim = head_dim;
             i.tokens = tokens;
             i.rope_theta = rope_theta;
             i.rope_style = parse_rope_style(rope_style);
             i.k_after_rope = k_after_rope;
             i.has_k_pre_rope = k_pre_rope;
             i.dtype = parse_capture_dtype(dtype);
             i.token_ids = std::move(token_ids);
             i.text = text;
             i.source = source;
             auto w = std::make_unique<DumpWriter>(path, i, DumpWriteOptions{compress, chunk_tokens});
             return PyDumpWriter{std::move(w), i};
           }),
           py::arg("path"), py::kw_only(), py::arg("model"), py::arg("num_layers"), py::arg("num_q_heads"),
           py::arg("num_kv_heads"), py::arg("head_dim"), py::arg("tokens"), py::arg("rope_theta") = 10000.0,
           py::arg("rope_style") = "halves", py::arg("k_after_rope") = true, py::arg("k_pre_rope") = false,
           py::arg("dtype") = "float32", py::arg("token_ids") = std::vector<int32_t>{}, py::arg("text") = "",
           py::arg("source") = "kvlab.DumpWriter (Python)", py::arg("compress") = true,
           py::arg("chunk_tokens") = 1024)
      .def(
          "write",
          [](PyDumpWriter& w, int64_t layer, const std::string& role, py::handle x) {
            InputArray in = input_array(x, role);
            DumpWriter& dw = w.get();
            py::gil_scoped_release release;
            dw.write(layer, parse_role(role), in.view);
          },
          py::arg("layer"), py::arg("role"), py::arg("x"))
      .def("commit",
           [](PyDumpWriter& w) {
             w.get().commit();
             w.w.reset();
           })
      .def("discard", [](PyDumpWriter& w) { w.w.reset(); });
}

}  // namespace kvlab::bind
