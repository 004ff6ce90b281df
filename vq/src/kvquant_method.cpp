// The `kvquant` method family: keys quantized per channel before RoPE with k-means levels
// learned on calibration tokens, RoPE applied after dequantization; values per token; dense-and-
// sparse outliers in both (kvlab/kvquant.h). The levels learn from the first tokens of the dump
// (not evaluated) or from another dump's k_pre_rope (every token evaluated).
#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <utility>
#include <vector>

#include "kvlab/dump.h"
#include "kvlab/kv_text.h"
#include "kvlab/kvquant.h"
#include "kvlab/method.h"

namespace kvlab {
namespace {

const std::string kName = "kvquant";

// calib=half | first:N | dump:PATH
struct Calib {
  int64_t first = 0;  // first:N; 0 with an empty path: half
  std::string path;   // dump:PATH
};

Calib parse_calib(const std::string& v) {
  if (v == "half") return {};
  if (v.rfind("first:", 0) == 0) {
    const int64_t n = text::parse_count(v.substr(6), "calib first:N");
    if (n < 1) throw std::invalid_argument("calib='" + v + "': N must be >= 1");
    return {n, ""};
  }
  if (v.rfind("dump:", 0) == 0 && v.size() > 5) return {0, v.substr(5)};
  throw std::invalid_argument("calib='" + v + "' is not valid; choose one of: half, first:N, dump:PATH");
}

std::string pre_rope_missing(const std::string& where) {
  return where +
         " has no k_pre_rope: capture it with `kvlab dump` (the C++ runner always writes it), `kvlab synth "
         "--k-pre-rope`, or kvlab.capture(..., store_pre_rope=True)";
}

class Kvquant final : public Method {
 public:
  Kvquant(int kbits, int vbits, double outliers, Calib calib)
      : kbits_(kbits), vbits_(vbits), outliers_(outliers), calib_(std::move(calib)) {
    if (kbits < 1 || kbits > 8 || vbits < 1 || vbits > 8)
      throw std::invalid_argument("method '" + spec() + "': kbits and vbits must be in 1..8");
    if (!(outliers >= 0.0 && outliers < 0.5))
      throw std::invalid_argument("method '" + spec() + "': outliers must be a share in [0, 0.5)");
    if (!calib_.path.empty()) {
      dump_ = open_dump(calib_.path);
      if (!dump_->info().has_k_pre_rope)
        throw std::invalid_argument(pre_rope_missing("calibration dump '" + calib_.path + "'"));
    }
  }
  const std::string& family() const override { return kName; }
  std::string spec() const override {
    const std::string c = !calib_.path.empty() ? "dump:" + calib_.path
                          : calib_.first       ? "first:" + std::to_string(calib_.first)
                                               : std::string("half");
    return kName + ":kbits=" + std::to_string(kbits_) + ",vbits=" + std::to_string(vbits_) +
           ",outliers=" + text::format_double(outliers_) + ",calib=" + c;
  }
  // Every token is quantized; tokens the levels learned from are not evaluated.
  Schedule schedule(int64_t T) const override {
    const int64_t c = dump_ ? 0 : std::min(calib_end(T), T);
    return {c, T, c, T};
  }
  std::string calibration() const override {
    if (dump_)
      return "key levels from dump " + calib_.path + " (" + std::to_string(dump_->info().tokens) +
             " tokens of " + dump_->info().model + "); every token evaluated";
    if (calib_.first)
      return "key levels from the first " + std::to_string(calib_.first) +
             " tokens of each head (kvlab eval: not evaluated; decoding, kvlab ppl: held in fp16 until the "
             "levels exist, and evaluated as the rest of the text)";
    return "key levels from the first floor(T/2) tokens of each head, which are not evaluated";
  }
  Bits bits(int64_t T, int64_t D) const override {
    const int64_t n = kvquant_outlier_count(outliers_, D);
    return {kvquant_key_bits(kbits_, n, T, D), kvquant_value_bits(vbits_, n, D)};
  }
  std::vector<std::string> files() const override {
    return dump_ ? std::vector<std::string>{calib_.path} : std::vector<std::string>{};
  }
  bool needs_k_pre_rope() const override { return true; }
  // Decoding (docs/FORMATS.md section 12): keys and values are quantized per token against
  // levels that exist before the token does, so each token is quantized as it arrives. dump:
  // the levels exist from the start. first:N: fp16 until N tokens have come, then every token
  // with the levels of the first N. half: the levels need the whole sequence; refused.
  Schedule decode_schedule(int64_t n) const override {
    if (!dump_ && !calib_.first)
      throw std::invalid_argument("method '" + spec() +
                                  "': calib=half learns the key levels from the first half of the whole "
                                  "sequence, which a decoding cache does not have yet; use calib=dump:PATH "
                                  "(levels from another text's k_pre_rope) or calib=first:N");
    if (!dump_ && n <= calib_.first) return {};
    return {0, n, 0, n};
  }
  int64_t decode_apply_tokens(int64_t n) const override { return dump_ || n > calib_.first ? n : 0; }
  void check_model(const ModelShape& s) const override {
    if (!dump_) return;
    const DumpInfo& i = dump_->info();
    if (i.num_layers != s.num_layers || i.num_kv_heads != s.num_kv_heads || i.head_dim != s.head_dim)
      throw std::invalid_argument(
          "calibration dump '" + calib_.path + "' has " + std::to_string(i.num_layers) + " layers x " +
          std::to_string(i.num_kv_heads) + " KV heads x head_dim " + std::to_string(i.head_dim) +
          ", the evaluated model " + std::to_string(s.num_layers) + " x " + std::to_string(s.num_kv_heads) +
          " x " + std::to_string(s.head_dim));
  }
  Reconstruction apply(const TensorView& k, const TensorView& v, const HeadContext& at) const override {
    if (k.shape != v.shape || k.shape.size() != 3 || k.shape[0] != 1)
      throw std::invalid_argument("method '" + spec() + "': keys " + shape_string(k.shape) + " and values " +
                                  shape_string(v.shape) + " must both be one head (1, T, D)");
    if (!at.k_pre_rope.data)
      throw std::invalid_argument("method '" + spec() + "': " + pre_rope_missing("the input"));
    if (at.k_pre_rope.shape != k.shape)
      throw std::invalid_argument("method '" + spec() + "': k_pre_rope " + shape_string(at.k_pre_rope.shape) +
                                  " is not shaped as k " + shape_string(k.shape));
    check_finite(k, "kvquant keys");
    check_finite(v, "kvquant values");
    check_finite(at.k_pre_rope, "kvquant k_pre_rope");
    const int64_t T = k.shape[1], D = k.shape[2], n_out = kvquant_outlier_count(outliers_, D);
    const std::vector<float> pre = widen(at.k_pre_rope), vals = widen(v);
    std::vector<float> levels;
    if (dump_) {
      levels = dump_levels(at, D);
    } else {
      const int64_t c = calib_end(T);
      if (c < 1 || c >= T)
        throw std::invalid_argument("method '" + spec() + "': " + std::to_string(c) +
                                    " calibration tokens of " + std::to_string(T) +
                                    " leave no calibration or no evaluated token");
      levels = kvquant_train_levels(pre.data(), c, D, kbits_, outliers_);
    }
    Reconstruction r;
    r.k.shape = r.v.shape = k.shape;
    r.k.data.resize(T * D);
    r.v.data.resize(T * D);
    kvquant_keys(pre.data(), T, D, levels, kbits_, n_out, r.k.data.data());
    apply_rope(r.k.data.data(), T, D, at.rope_style, at.rope_theta);
    kvquant_values(vals.data(), T, D, vbits_, n_out, r.v.data.data());
    return r;
  }

 private:
  int64_t calib_end(int64_t T) const { return calib_.first ? calib_.first : T / 2; }

  static std::vector<float> widen(const TensorView& x) {
    std::vector<float> out(x.numel());
    for (int64_t i = 0; i < x.numel(); ++i) out[i] = x.at(i);
    return out;
  }

  // This head's levels from the calibration dump's k_pre_rope, trained once per head and kept:
  // a decoding simulation calls apply() after every block and generated token. Trained outside
  // the lock (eval runs heads in parallel; the HDF5 reader serializes libhdf5 calls itself).
  std::vector<float> dump_levels(const HeadContext& at, int64_t D) const {
    const std::pair<int64_t, int64_t> key{at.layer, at.kv_head};
    {
      const std::lock_guard<std::mutex> lock(mu_);
      const auto it = levels_.find(key);
      if (it != levels_.end()) return it->second;
    }
    const Tensor c = dump_->read_head(at.layer, Role::KPreRope, at.kv_head);
    std::vector<float> l = kvquant_train_levels(c.data.data(), c.shape[1], D, kbits_, outliers_);
    const std::lock_guard<std::mutex> lock(mu_);
    return levels_.emplace(key, std::move(l)).first->second;
  }

  int kbits_, vbits_;
  double outliers_;
  Calib calib_;
  std::shared_ptr<const DumpReader> dump_;
  mutable std::mutex mu_;
  mutable std::map<std::pair<int64_t, int64_t>, std::vector<float>> levels_;  // (layer, kv head)
};

}  // namespace

MethodFamily kvquant_family() {
  MethodFamily f;
  f.name = kName;
  f.summary =
      "KVQuant-style: keys per channel before RoPE on k-means levels (calibrated, RoPE after "
      "dequantization), "
      "values per token, dense-and-sparse outliers in fp16";
  f.keys = {{"kbits", "3", "key code bits: 2^kbits fp16 levels per channel"},
            {"vbits", "3", "value code bits: uniform per token, fp16 scale and zero"},
            {"outliers", "0.01", "share of each token's elements kept in fp16 (round(share x D) per token)"},
            {"calib", "half",
             "what the key levels learn from: half (the first floor(T/2) tokens, not evaluated), first:N, "
             "or dump:PATH (that dump's k_pre_rope; every token evaluated)"}};
  const auto preset = [](int b) {
    const std::string n = std::to_string(b);
    return Preset{"kvquant-" + n, "kvquant:kbits=" + n + ",vbits=" + n + ",outliers=0.01,calib=half",
                  "KVQuant-style " + n + "-bit keys and values, 1% outliers, levels from the first half"};
  };
  f.presets = {preset(4), preset(3), preset(2)};
  f.parse = [](const std::string& args) -> MethodPtr {
    int kbits = 3, vbits = 3;
    double outliers = 0.01;
    Calib calib;
    for (const auto& [key, value] : text::split_pairs(args, "method spec")) {
      switch (text::choose(key, kName + " key", {"kbits", "vbits", "bits", "outliers", "calib"})) {
        case 0: kbits = text::parse_int(value, key); break;
        case 1: vbits = text::parse_int(value, key); break;
        case 2: kbits = vbits = text::parse_int(value, key); break;
        case 3: outliers = text::parse_double(value, key); break;
        default: calib = parse_calib(value);
      }
    }
    return std::make_shared<const Kvquant>(kbits, vbits, outliers, calib);
  };
  return f;
}

}  // namespace kvlab
