// k-means (faiss-like) and VQ codebooks on arrays: train, encode, decode, frequency reordering.
#include "kvlab/vq.h"
#include "common.h"
#include "kvlab/kmeans.h"
#include "kvlab/vq_reorder.h"

namespace kvlab::bind {
namespace {

// x as a 2-D float32 array (rows, cols), in place.
InputArray matrix(py::handle x, const std::string& name) {
  InputArray in = input_array(x, name);
  if (in.view.dtype != DType::F32 || in.view.shape.size() != 2)
    throw std::invalid_argument(name + ": expected a 2-D float32 array, got " +
                                std::string(in.view.dtype == DType::F32 ? "float32 " : "float16 ") +
                                shape_string(in.view.shape));
  return in;
}

std::vector<int64_t> book_shape(const VQCodebooks& cb) {
  return {cb.spec.stages, cb.groups(), cb.spec.entries(), cb.spec.vec};
}

py::array codes_array(std::vector<uint8_t>&& codes, std::vector<int64_t> shape) {
  auto* owned = new std::vector<uint8_t>(std::move(codes));
  return wrap(shape, owned->data(),
              py::capsule(owned, [](void* p) { delete static_cast<std::vector<uint8_t>*>(p); }));
}

void check_codes(const VQCodebooks& cb, const InputArray& c, int64_t& T) {
  const auto& s = c.view.shape;
  if (s.size() != 3 || s[1] != cb.spec.stages || s[2] != cb.groups())
    throw std::invalid_argument("codes: shape " + shape_string(s) + " is not (T, " +
                                std::to_string(cb.spec.stages) + ", " + std::to_string(cb.groups()) + ")");
  T = s[0];
}

InputArray codes_input(py::handle codes) {
  auto* raw = new Py_buffer();  // buffer_info owns it: releases and deletes it
  if (PyObject_GetBuffer(codes.ptr(), raw, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) != 0) {
    delete raw;
    PyErr_Clear();
    throw std::invalid_argument("codes: expected a C-contiguous uint8 array");
  }
  InputArray in{py::buffer_info(raw), {}};
  if (in.buffer.itemsize != 1 || (in.buffer.format != "B" && in.buffer.format != "<B"))
    throw std::invalid_argument("codes: expected uint8, got format '" + in.buffer.format + "'");
  in.view = {in.buffer.ptr, DType::F32, std::vector<int64_t>(in.buffer.shape.begin(), in.buffer.shape.end())};
  return in;
}

}  // namespace

void bind_vq(py::module_& m) {
  m.def(
      "kmeans",
      [](py::handle x, int64_t k, int iters, int restarts, uint64_t seed, const std::string& init,
         int64_t max_points_per_centroid, const std::string& split, int threads, py::object weights,
         py::object init_centroids) {
        InputArray in = matrix(x, "x");
        const int64_t n = in.view.shape[0], d = in.view.shape[1];
        KMeansParams p;
        p.k = k;
        p.iters = iters;
        p.restarts = restarts;
        p.seed = seed;
        p.init = parse_kmeans_init(init);
        p.max_points_per_centroid = max_points_per_centroid;
        if (split != "largest" && split != "faiss")
          throw std::invalid_argument("split='" + split + "' is not valid; choose one of: largest, faiss");
        p.split = split == "faiss" ? KMeansSplit::Faiss : KMeansSplit::Largest;
        p.threads = threads;
        std::optional<InputArray> w, c;
        if (!weights.is_none()) {
          w = input_array(weights, "weights");
          if (w->view.dtype != DType::F32 || w->view.shape != std::vector<int64_t>{n})
            throw std::invalid_argument("weights: expected float32 of shape (" + std::to_string(n) +
                                        ",), got " + shape_string(w->view.shape));
        }
        if (!init_centroids.is_none()) {
          c = matrix(init_centroids, "init_centroids");
          if (c->view.shape != std::vector<int64_t>{k, d})
            throw std::invalid_argument("init_centroids: shape " + shape_string(c->view.shape) +
                                        " is not (k, d) = " + shape_string({k, d}));
        }
        KMeansResult r;
        {
          py::gil_scoped_release release;
          r = kmeans(static_cast<const float*>(in.view.data), n, d, p,
                     w ? static_cast<const float*>(w->view.data) : nullptr,
                     c ? static_cast<const float*>(c->view.data) : nullptr);
        }
        py::list iterations;
        for (const auto& it : r.iterations)
          iterations.append(py::dict(py::arg("objective") = it.objective, py::arg("time_s") = it.time_s,
                                     py::arg("imbalance") = it.imbalance, py::arg("splits") = it.splits));
        py::dict out;
        out["centroids"] = tensor_array(Tensor{{r.k, r.d}, std::move(r.centroids)});
        py::array assign = new_array("int32", {r.n}, 4);
        std::copy(r.assign.begin(), r.assign.end(), static_cast<int32_t*>(assign.mutable_data()));
        out["assign"] = assign;
        out["objective"] = r.objective;
        out["mse"] = r.mse();
        out["iterations"] = iterations;
        out["restart_objectives"] = r.restart_objectives;
        out["best_restart"] = r.best_restart;
        out["trained_points"] = r.trained_points;
        return out;
      },
      py::arg("x"), py::arg("k"), py::arg("iters"), py::arg("restarts"), py::arg("seed"), py::arg("init"),
      py::arg("max_points_per_centroid"), py::arg("split"), py::arg("threads"), py::arg("weights"),
      py::arg("init_centroids"));

  py::class_<VQCodebooks>(m, "Codebooks")
      .def_property_readonly("spec", [](const VQCodebooks& cb) { return to_string(cb.spec); })
      .def_property_readonly("head_dim", [](const VQCodebooks& cb) { return cb.head_dim; })
      .def_property_readonly("data",
                             [](py::object self) {
                               const auto& cb = self.cast<const VQCodebooks&>();
                               return view_of(book_shape(cb), cb.data.data(), self);
                             })
      .def(
          "bits_per_element",
          [](const VQCodebooks& cb, int64_t tokens) {
            return vq_bits_per_element(cb.spec, tokens, cb.head_dim);
          },
          py::arg("tokens"))
      .def(
          "encode",
          [](const VQCodebooks& cb, py::handle x, int threads) {
            InputArray in = matrix(x, "x");
            if (in.view.shape[1] != cb.head_dim)
              throw std::invalid_argument("x: " + std::to_string(in.view.shape[1]) +
                                          " channels, the codebooks have " + std::to_string(cb.head_dim));
            const int64_t T = in.view.shape[0];
            std::vector<uint8_t> codes;
            {
              py::gil_scoped_release release;
              codes = vq_encode(cb, static_cast<const float*>(in.view.data), T, threads);
            }
            return codes_array(std::move(codes), {T, cb.spec.stages, cb.groups()});
          },
          py::arg("x"), py::arg("threads") = 1)
      .def(
          "decode",
          [](const VQCodebooks& cb, py::handle codes) {
            InputArray c = codes_input(codes);
            int64_t T = 0;
            check_codes(cb, c, T);
            std::vector<float> x;
            {
              py::gil_scoped_release release;
              x = vq_decode(cb, static_cast<const uint8_t*>(c.view.data), T);
            }
            return tensor_array(Tensor{{T, cb.head_dim}, std::move(x)});
          },
          py::arg("codes"));

  m.def(
      "vq_train",
      [](py::handle x, const std::string& spec, int iters, const std::string& init, uint64_t seed,
         int threads) {
        InputArray in = matrix(x, "x");
        const VQSpec s = parse_vq_spec(spec);
        check_vq_fits(s, in.view.shape[1]);
        KMeansParams p;
        p.iters = iters;
        p.init = parse_kmeans_init(init);
        p.seed = seed;
        p.threads = threads;
        py::gil_scoped_release release;
        return vq_train(static_cast<const float*>(in.view.data), in.view.shape[0], in.view.shape[1], s, p);
      },
      py::arg("x"), py::arg("spec"), py::arg("iters"), py::arg("init"), py::arg("seed"), py::arg("threads"));

  m.def(
      "vq_reorder",
      [](const VQCodebooks& books, py::handle codes, int64_t reg_bytes, int64_t smem_bytes) {
        InputArray c = codes_input(codes);
        int64_t T = 0;
        check_codes(books, c, T);
        VQCodebooks cb = books;
        std::vector<uint8_t> remapped(static_cast<const uint8_t*>(c.view.data),
                                      static_cast<const uint8_t*>(c.view.data) + numel(c.view.shape));
        std::vector<int64_t> usage = vq_usage(cb, remapped.data(), T);
        const std::vector<uint8_t> old_of_new = vq_reorder(cb, usage, remapped.data(), T);
        const int64_t K = cb.spec.entries();
        py::list levels;
        for (int64_t b = 0; b < (int64_t)usage.size() / K; ++b) {
          const CacheLevels l = cache_levels(&usage[b * K], K, 2 * cb.spec.vec, reg_bytes, smem_bytes);
          levels.append(py::dict(py::arg("hot") = l.hot, py::arg("n_reg") = l.n_reg,
                                 py::arg("n_shared") = l.n_shared, py::arg("share_reg") = l.share_reg,
                                 py::arg("share_shared") = l.share_shared,
                                 py::arg("share_global") = l.share_global, py::arg("coverage") = l.coverage));
        }
        const std::vector<int64_t> per_book = {cb.spec.stages, cb.groups(), K};
        py::array u = new_array("int64", per_book, 8);
        std::copy(usage.begin(), usage.end(), static_cast<int64_t*>(u.mutable_data()));
        py::dict out;
        out["codebooks"] = py::cast(std::move(cb));
        out["codes"] = codes_array(std::move(remapped), c.view.shape);
        out["usage"] = u;
        out["old_of_new"] = codes_array(std::vector<uint8_t>(old_of_new), per_book);
        out["levels"] = levels;
        return out;
      },
      py::arg("codebooks"), py::arg("codes"), py::arg("reg_bytes"), py::arg("smem_bytes"));
}

}  // namespace kvlab::bind
