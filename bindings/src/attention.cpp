// kvlab.gpu's decode attention (builds with CUDA; kvlab/gpu.py checks the tensors first): a
// method's packed cache on a CUDA device (make_decode_cache), decode_attention_device on device
// pointers (torch CUDA tensors, on torch's stream), the host decode_attention (`kvlab gpu
// attend-validate`'s) on numpy arrays, and FORMATS 9.3's error bound of a run.
#include "common.h"
#if defined(KVLAB_PY_GPU)
#include <cuda_runtime.h>

#include "kvlab/method.h"
#include "kvlab_eval_gpu/vq_encoder.h"
#include "kvlab_gpu/attention.h"
#include "on_device.h"
#endif

namespace kvlab::bind {

#if defined(KVLAB_PY_GPU)
namespace {

struct PyDecodeCache {
  std::shared_ptr<const gpu::DecodeCache> c;
  int device = 0;
  std::string method;
};

// What one decode_attention ran (kernel, splits, each sequence's sums) on which cache.
struct PyDecodeRun {
  std::shared_ptr<const gpu::DecodeCache> c;
  gpu::DecodeResult r;
  int Hq = 0;
};

gpu::DecodeOptions options(const std::string& kernel, int splits) {
  if (splits < 0 || splits > 4096)
    throw std::invalid_argument("splits=" + std::to_string(splits) +
                                ": want 0 (as many as fill the GPU) to 4096");
  gpu::DecodeOptions o;
  o.kernel = gpu::parse_decode_kernel(kernel);
  o.splits = splits;
  return o;
}

// Per-sequence (KV heads, L_b, D) arrays, read in place.
std::vector<InputArray> sequences(const std::vector<py::handle>& xs, const std::string& name) {
  std::vector<InputArray> out;
  for (size_t b = 0; b < xs.size(); ++b) {
    out.push_back(input_array(xs[b], name + "[" + std::to_string(b) + "]"));
    if (out.back().view.shape.size() != 3)
      throw std::invalid_argument(name + "[" + std::to_string(b) + "]: shape " +
                                  shape_string(out.back().view.shape) + " (want (KV heads, L, head_dim))");
  }
  return out;
}

// A float32 array of exactly `shape` (the host q, K_hat, V_hat of the checks).
const float* f32(const InputArray& a, const std::vector<int64_t>& shape, const std::string& name) {
  if (a.view.dtype != DType::F32 || a.view.shape != shape)
    throw std::invalid_argument(name + ": " + (a.view.dtype == DType::F32 ? "float32" : "float16") + " " +
                                shape_string(a.view.shape) + " (want float32 " + shape_string(shape) + ")");
  return static_cast<const float*>(a.view.data);
}

py::array_t<double> error_bounds(const PyDecodeRun& run, py::handle q, const std::vector<py::handle>& k_hat,
                                 const std::vector<py::handle>& v_hat) {
  const gpu::DecodeCache& c = *run.c;
  const int B = c.batch(), Hkv = c.kv_heads(), D = c.head_dim(), Hq = run.Hq;
  if ((int)k_hat.size() != B || (int)v_hat.size() != B)
    throw std::invalid_argument("error_bound: " + std::to_string(k_hat.size()) + " K_hat and " +
                                std::to_string(v_hat.size()) + " V_hat sequences for a cache of " +
                                std::to_string(B));
  const InputArray qa = input_array(q, "q");
  const float* qp = f32(qa, {B, Hq, D}, "q");
  const std::vector<InputArray> ks = sequences(k_hat, "k_hat"), vs = sequences(v_hat, "v_hat");
  py::array_t<double> out({(py::ssize_t)B, (py::ssize_t)Hq});
  auto o = out.mutable_unchecked<2>();
  for (int b = 0; b < B; ++b) {
    const int64_t L = c.lengths()[b];
    const float* kp = f32(ks[b], {Hkv, L, D}, "k_hat[" + std::to_string(b) + "]");
    const float* vp = f32(vs[b], {Hkv, L, D}, "v_hat[" + std::to_string(b) + "]");
    const gpu::DecodeShape& shape = run.r.shapes[b];
    const gpu::PackedMagnitudes* mag = shape.mma ? &gpu::packed_magnitudes(c, b) : nullptr;
    for (int hq = 0; hq < Hq; ++hq) {
      const size_t head = (size_t)(hq / (Hq / Hkv)) * L * D;
      o(b, hq) =
          gpu::decode_error_bound(qp + ((size_t)b * Hq + hq) * D, kp + head, vp + head, (int)L, D, shape,
                                  mag ? mag->k.data() + head : nullptr, mag ? mag->v.data() + head : nullptr);
    }
  }
  return out;
}

}  // namespace

void bind_attention(py::module_& m) {
  install_vq_encoder();  // DecodeCache serves the vq family (codebook files), as `kvlab gpu` does
  py::class_<PyDecodeRun>(m, "DecodeRun")
      .def_property_readonly("kernel",
                             [](const PyDecodeRun& x) { return gpu::decode_kernel_name(x.r.kernel); })
      .def_property_readonly("splits", [](const PyDecodeRun& x) { return x.r.splits; })
      .def("error_bound", &error_bounds, py::arg("q"), py::arg("k_hat"), py::arg("v_hat"));

  py::class_<PyDecodeCache>(m, "DecodeCache")
      .def(py::init([](const std::string& spec, const std::vector<py::handle>& keys,
                       const std::vector<py::handle>& values, int device) {
             const MethodPtr method = parse_method(spec);
             const std::vector<InputArray> ks = sequences(keys, "keys"), vs = sequences(values, "values");
             std::vector<TensorView> kv, vv;
             for (const auto& a : ks) kv.push_back(a.view);
             for (const auto& a : vs) vv.push_back(a.view);
             PyDecodeCache r;
             r.device = device;
             r.method = method->spec();
             r.c = on_device(device, [&] { return gpu::make_decode_cache(*method, kv, vv); });
             return r;
           }),
           py::arg("spec"), py::arg("keys"), py::arg("values"), py::arg("device"))
      .def_property_readonly("batch", [](const PyDecodeCache& x) { return x.c->batch(); })
      .def_property_readonly("kv_heads", [](const PyDecodeCache& x) { return x.c->kv_heads(); })
      .def_property_readonly("head_dim", [](const PyDecodeCache& x) { return x.c->head_dim(); })
      .def_property_readonly("lengths", [](const PyDecodeCache& x) { return x.c->lengths(); })
      .def_property_readonly("nbytes", [](const PyDecodeCache& x) { return x.c->bytes(); })
      .def_property_readonly("device", [](const PyDecodeCache& x) { return x.device; })
      .def_property_readonly("method", [](const PyDecodeCache& x) { return x.method; })
      .def(
          "attend_device",
          [](const PyDecodeCache& x, uintptr_t q, uintptr_t out, int Hq, const std::string& kernel,
             int splits, uintptr_t stream) {
            const gpu::DecodeOptions opt = options(kernel, splits);
            PyDecodeRun run{x.c, {}, Hq};
            run.r = on_device(x.device, [&] {
              return gpu::decode_attention_device(*x.c, reinterpret_cast<const float*>(q),
                                                  reinterpret_cast<float*>(out), Hq, opt,
                                                  reinterpret_cast<void*>(stream));
            });
            return run;
          },
          py::arg("q"), py::arg("out"), py::arg("Hq"), py::arg("kernel"), py::arg("splits"),
          py::arg("stream"))
      .def(
          "attend_host",
          [](const PyDecodeCache& x, py::handle q, const std::string& kernel, int splits) {
            const gpu::DecodeOptions opt = options(kernel, splits);
            const InputArray qa = input_array(q, "q");
            const auto& s = qa.view.shape;
            if (s.size() != 3 || s[0] != x.c->batch() || s[1] < 1 || s[2] != x.c->head_dim() ||
                qa.view.dtype != DType::F32)
              throw std::invalid_argument("q: " + shape_string(s) + " (want float32 (" +
                                          std::to_string(x.c->batch()) + ", query heads, " +
                                          std::to_string(x.c->head_dim()) + "))");
            const float* p = static_cast<const float*>(qa.view.data);
            const std::vector<float> qv(p, p + qa.view.numel());
            PyDecodeRun run{x.c, {}, (int)s[1]};
            run.r = on_device(x.device, [&] { return gpu::decode_attention(*x.c, qv, run.Hq, opt); });
            std::vector<float> out = std::move(run.r.out);
            run.r.out.clear();
            return py::make_tuple(tensor_array(Tensor{s, std::move(out)}), run);
          },
          py::arg("q"), py::arg("kernel"), py::arg("splits"));
}
#else
void bind_attention(py::module_&) {}
#endif

}  // namespace kvlab::bind
