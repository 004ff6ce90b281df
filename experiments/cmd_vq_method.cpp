// The eval method `vq:codebooks=CB.h5`: keys and values of every token encoded with the file's
// codebooks (both roles needed) and decoded, registered with eval's method registry.
#include <memory>
#include <stdexcept>

#include "kvlab/codebook_file.h"
#include "kvlab/evaluate.h"
#include "kvlab/method_registry.h"
#include "kvlab/vq.h"

namespace kvlab::cli {
namespace {

CustomMethod make_vq_method(const std::string& args, const EvalShape& shape) {
  if (args.rfind("codebooks=", 0) != 0 || args.size() <= 10)
    throw std::invalid_argument("vq method: expected vq:codebooks=FILE.h5, got 'vq:" + args + "'");
  const std::string path = args.substr(10);
  auto f = std::make_shared<const CodebookFile>(read_codebook_file(path));
  const int64_t rk = f->role_index("k"), rv = f->role_index("v");
  if (rk < 0 || rv < 0)
    throw std::invalid_argument("codebook file '" + path + "' lacks " + std::string(rk < 0 ? "k" : "v") +
                                " codebooks; train with --role kv");
  check_codebooks_match(*f, path, shape.num_layers, shape.num_kv_heads, shape.head_dim, "");
  const VQSpec spec = parse_vq_spec(f->spec);
  CustomMethod m;
  m.spec = "vq:codebooks=" + path + " (" + f->spec + ")";
  const double b = vq_bits_per_element(spec, shape.tokens, shape.head_dim);
  m.bits = {b, b};
  m.schedule = {0, shape.tokens, 0, shape.tokens};
  m.apply = [f, spec, path, rk, rv](int64_t layer, int64_t head, const TensorView& k, const TensorView& v) {
    if (layer < f->first_layer || layer >= f->first_layer + f->num_layers)
      throw std::invalid_argument("codebook file '" + path + "' covers layers " +
                                  std::to_string(f->first_layer) + "-" +
                                  std::to_string(f->first_layer + f->num_layers - 1) + ", not layer " +
                                  std::to_string(layer) + " (eval --layers)");
    const int64_t T = k.shape[1], D = k.shape[2];
    auto one = [&](int64_t role, const TensorView& x) {
      VQCodebooks cb;
      cb.spec = spec, cb.head_dim = D;
      const int64_t n = f->book_floats(), at = ((layer - f->first_layer) * f->num_kv_heads + head) * n;
      cb.data.assign(f->books[role].begin() + at, f->books[role].begin() + at + n);
      std::vector<float> widened;  // fp16 views (eval may pass them) become fp32 first
      const float* xp = static_cast<const float*>(x.data);
      if (x.dtype != DType::F32) {
        widened.resize(x.numel());
        for (int64_t i = 0; i < x.numel(); ++i) widened[i] = x.at(i);
        xp = widened.data();
      }
      Tensor out;
      out.shape = x.shape;
      out.data = vq_decode(cb, vq_encode(cb, xp, T, 1).data(), T);
      return out;
    };
    return Reconstruction{one(rk, k), one(rv, v)};
  };
  return m;
}

[[maybe_unused]] const int registered = register_method_family("vq", make_vq_method);

}  // namespace
}  // namespace kvlab::cli
