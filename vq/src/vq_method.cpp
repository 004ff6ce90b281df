// The `vq` method family: a codebook file, checked against the model, rebuilds each KV head's
// keys and values from its own codebooks.
#include "kvlab/vq_method.h"

#include <memory>
#include <mutex>
#include <stdexcept>

#include "kvlab/codebook_file.h"
#include "kvlab/method.h"
#include "kvlab/vq.h"

namespace kvlab {
namespace {

const std::string kName = "vq";
const std::string kKey = "codebooks=";

class VqMethod final : public Method {
 public:
  // args: codebooks=PATH, optionally followed by " (SPEC)" as spec() prints it; SPEC must then
  // be the file's.
  explicit VqMethod(const std::string& args) {
    if (args.rfind(kKey, 0) != 0 || args.size() <= kKey.size())
      throw std::invalid_argument("vq method: expected vq:codebooks=FILE.h5, got 'vq:" + args + "'");
    path_ = args.substr(kKey.size());
    std::string claimed;
    const size_t open = path_.rfind(" (");
    if (open != std::string::npos && path_.back() == ')') {
      claimed = path_.substr(open + 2, path_.size() - open - 3);
      path_.resize(open);
    }
    file_ = std::make_shared<const CodebookFile>(read_codebook_file(path_));
    if (!claimed.empty() && claimed != file_->spec)
      throw std::invalid_argument("codebook file '" + path_ + "' holds " + file_->spec + ", not " + claimed);
    rk_ = file_->role_index("k");
    rv_ = file_->role_index("v");
    if (rk_ < 0 || rv_ < 0)
      throw std::invalid_argument("codebook file '" + path_ + "' lacks " + std::string(rk_ < 0 ? "k" : "v") +
                                  " codebooks; train with --role kv");
    vq_ = parse_vq_spec(file_->spec);
  }
  const std::string& family() const override { return kName; }
  std::string spec() const override { return "vq:codebooks=" + path_ + " (" + file_->spec + ")"; }
  Schedule schedule(int64_t T) const override { return {0, T, 0, T}; }
  Bits bits(int64_t T, int64_t D) const override {
    const double b = vq_bits_per_element(vq_, T, D);
    return {b, b};
  }
  std::vector<std::string> files() const override { return {path_}; }
  // Each token is encoded alone with fixed codebooks: quantized as it arrives.
  Schedule decode_schedule(int64_t n) const override { return {0, n, 0, n}; }
  // The codebook's training data; eval cannot tell whether it is the evaluated dump: train on
  // another dump (or other tokens) for held-out numbers.
  std::string calibration() const override {
    return "codebooks trained on " + std::to_string(file_->tokens) + " tokens of " + file_->model + " (" +
           file_->source + "); every token evaluated";
  }
  void check_model(const ModelShape& s) const override {
    check_codebooks_match(*file_, path_, s.num_layers, s.num_kv_heads, s.head_dim, "");
  }
  Reconstruction apply(const TensorView& k, const TensorView& v, const HeadContext& at) const override {
    const CodebookFile& f = *file_;
    if (at.layer < f.first_layer || at.layer >= f.first_layer + f.num_layers)
      throw std::invalid_argument("codebook file '" + path_ + "' covers layers " +
                                  std::to_string(f.first_layer) + "-" +
                                  std::to_string(f.first_layer + f.num_layers - 1) + ", not layer " +
                                  std::to_string(at.layer) + " (eval --layers)");
    if (k.shape != v.shape || k.shape.size() != 3 || k.shape[0] != 1)
      throw std::invalid_argument("vq method: keys " + shape_string(k.shape) + " and values " +
                                  shape_string(v.shape) + " must both be one head (1, T, D)");
    return {decode(rk_, k, at), decode(rv_, v, at)};
  }

  // The books of (layer, head) for role index `role` (rk_ or rv_).
  VQCodebooks books(int64_t role, int64_t layer, int64_t kv_head, int64_t D) const {
    const CodebookFile& f = *file_;
    if (layer < f.first_layer || layer >= f.first_layer + f.num_layers || kv_head < 0 ||
        kv_head >= f.num_kv_heads || D != f.head_dim)
      throw std::invalid_argument(
          "codebook file '" + path_ + "' (layers " + std::to_string(f.first_layer) + "-" +
          std::to_string(f.first_layer + f.num_layers - 1) + ", " + std::to_string(f.num_kv_heads) +
          " KV heads, head_dim " + std::to_string(f.head_dim) + ") has no books for layer " +
          std::to_string(layer) + ", KV head " + std::to_string(kv_head) + ", head_dim " + std::to_string(D));
    VQCodebooks cb;
    cb.spec = vq_;
    cb.head_dim = D;
    const int64_t n = f.book_floats(), first = ((layer - f.first_layer) * f.num_kv_heads + kv_head) * n;
    cb.data.assign(f.books[role].begin() + first, f.books[role].begin() + first + n);
    return cb;
  }
  int64_t first_layer() const { return file_->first_layer; }
  int64_t key_role() const { return rk_; }
  int64_t value_role() const { return rv_; }

 private:
  Tensor decode(int64_t role, const TensorView& x, const HeadContext& at) const {
    const int64_t T = x.shape[1], D = x.shape[2];
    const VQCodebooks cb = books(role, at.layer, at.kv_head, D);
    std::vector<float> widened;  // fp16 views (eval passes them for fp16 dumps) become fp32 first
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
  }

  std::string path_;
  std::shared_ptr<const CodebookFile> file_;
  VQSpec vq_;
  int64_t rk_ = -1, rv_ = -1;
};

const VqMethod& as_vq(const Method& m) {
  const auto* v = dynamic_cast<const VqMethod*>(&m);
  if (!v) throw std::invalid_argument("method '" + m.spec() + "' is not of the vq family");
  return *v;
}

}  // namespace

VqMethodBooks vq_method_books(const Method& m, int64_t layer, int64_t kv_head, int64_t head_dim) {
  const VqMethod& v = as_vq(m);
  return {v.books(v.key_role(), layer, kv_head, head_dim), v.books(v.value_role(), layer, kv_head, head_dim)};
}

int64_t vq_method_first_layer(const Method& m) { return as_vq(m).first_layer(); }

MethodFamily kvquant_family();  // kvquant_method.cpp

void register_vq_method() {
  static std::once_flag once;
  std::call_once(once, [] {
    register_method_family(kvquant_family());
    MethodFamily f;
    f.name = kName;
    f.summary = "vector quantization with the codebooks of `kvlab vq train --role kv`, every token";
    f.keys = {{"codebooks", "", "codebook file (.h5) for this model, both roles; printed with its spec"}};
    f.parse = [](const std::string& args) -> MethodPtr { return std::make_shared<const VqMethod>(args); };
    register_method_family(std::move(f));
  });
}

}  // namespace kvlab
