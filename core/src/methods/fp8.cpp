// fp8: keys and values as FP8 codes (e4m3 or e5m2, per role) times fp32 scales per tensor, head
// or (head, channel); every token quantized. Scales are dynamic (absmax of the tokens being
// quantized, scale = absmax / fp8 max) or calibrated (absmax or a percentile of |x| over the
// calibration tokens, by default the first half; those tokens are quantized with the same
// scales but left out of the schedule, so reconstruction errors are taken on the others). The
// codes are CUDA's conversion (round to nearest even, satfinite): float_format.h.
#include <stdexcept>

#include "kvlab/kv_text.h"
#include "uniform.h"

namespace kvlab::methods {
namespace {

const std::string kName = "fp8";

// calib=dynamic | max | percentile:P
struct Calib {
  bool dynamic = true;
  double percentile = 100.0;  // max: 100
  bool operator==(const Calib&) const = default;
};

Calib parse_calib(const std::string& v) {
  const std::string pre = "percentile:";
  if (v == "dynamic") return {};
  if (v == "max") return {false, 100.0};
  if (v.rfind(pre, 0) == 0) {
    const double p = text::parse_double(v.substr(pre.size()), "calib percentile");
    if (!(p > 0.0 && p <= 100.0))
      throw std::invalid_argument("calib='" + v + "': the percentile must be in (0, 100]");
    return {false, p};
  }
  throw std::invalid_argument("calib='" + v + "' is not valid; choose one of: dynamic, max, percentile:P");
}

std::string calib_text(const Calib& c) {
  if (c.dynamic) return "dynamic";
  return c.percentile == 100.0 ? "max" : "percentile:" + text::format_double(c.percentile);
}

struct Fp8Params {
  FloatFormat k = FloatFormat::E4M3, v = FloatFormat::E4M3;
  FloatScale scale = FloatScale::Head;
  Calib calib;
  int calib_tokens = 0;  // 0: the first half (floor(T / 2)); else the first n tokens
};

class Fp8 final : public Method {
 public:
  explicit Fp8(Fp8Params p) : p_(p) {}
  const std::string& family() const override { return kName; }
  std::string spec() const override {
    return kName + ":kfmt=" + enum_name(p_.k) + ",vfmt=" + enum_name(p_.v) + ",scale=" + enum_name(p_.scale) +
           ",calib=" + calib_text(p_.calib) +
           ",calib_tokens=" + (p_.calib_tokens ? std::to_string(p_.calib_tokens) : std::string("half"));
  }
  // Dynamic: every token. Calibrated: every token is quantized, the calibration tokens are not
  // evaluated.
  Schedule schedule(int64_t T) const override {
    const int64_t c = p_.calib.dynamic ? 0 : std::min<int64_t>(calib_end(T), T);
    return {c, T, c, T};
  }
  std::string calibration() const override {
    if (p_.calib.dynamic) return {};
    return "scales from the first " +
           (p_.calib_tokens ? std::to_string(p_.calib_tokens) : std::string("floor(T/2)")) +
           " tokens of each head, which are not evaluated";
  }
  Bits bits(int64_t T, int64_t D) const override {
    return {float_packed_bits({T, D}, {p_.k, p_.scale}) / (double)(T * D),
            float_packed_bits({T, D}, {p_.v, p_.scale}) / (double)(T * D)};
  }
  // Calibrated with calib_tokens=c: the scales are fixed once c tokens exist, and every token
  // (the calibration tokens included) is quantized with them from the next token on; until
  // then the cache is fp16. Dynamic scales and calib_tokens=half need every token: refused.
  Schedule decode_schedule(int64_t n) const override {
    auto refuse = [&](const std::string& why) {
      return std::invalid_argument("method '" + spec() + "' cannot be decoded: " + why);
    };
    if (p_.calib.dynamic)
      throw refuse(
          "dynamic scales are the absmax of every token, which a decoding cache does not have yet; "
          "calibrate on the first tokens: fp8:calib=max,calib_tokens=128");
    if (!p_.calib_tokens)
      throw refuse("calib_tokens=half depends on the sequence length; give a count (calib_tokens=128)");
    return n > p_.calib_tokens ? every_token(n) : Schedule{};
  }
  int64_t decode_apply_tokens(int64_t n) const override { return n > p_.calib_tokens ? n : 0; }
  Reconstruction apply(const TensorView& k, const TensorView& v, const HeadContext& at) const override {
    check_inputs(k, v);
    return {role(k, p_.k, at.codec), role(v, p_.v, at.codec)};
  }

 private:
  int64_t calib_end(int64_t T) const { return p_.calib_tokens ? p_.calib_tokens : T / 2; }

  Tensor role(const TensorView& x, FloatFormat f, const Codec* codec) const {
    const FloatSpec s{f, p_.scale};
    if (p_.calib.dynamic) return float_roundtrip(x, s, {}, codec);
    const int64_t T = x.shape[x.shape.size() - 2], D = x.shape.back(), N = x.numel() / (T * D),
                  c = calib_end(T);
    if (c < 1 || c >= T)
      throw std::invalid_argument("method '" + spec() + "': " + std::to_string(c) +
                                  " calibration tokens of " + std::to_string(T) +
                                  " leave no calibration or no evaluated token");
    Tensor head;  // tokens [0, c) of every slice
    head.shape = x.shape;
    head.shape[head.shape.size() - 2] = c;
    head.data.resize(N * c * D);
    for (int64_t n = 0; n < N; ++n) load(x, n * T * D, c * D, &head.data[n * c * D]);
    return float_roundtrip(x, s, float_scales(head.view(), s, {p_.calib.percentile}), codec);
  }

  Fp8Params p_;
};

FloatFormat parse_fp8(const std::string& v, const std::string& key) {
  const FloatFormat f = parse_enum<FloatFormat>(v, key);
  if (f != FloatFormat::E4M3 && f != FloatFormat::E5M2)
    throw std::invalid_argument(key + "='" + v +
                                "' is not valid; choose one of: e4m3, e5m2 (fp4: family fp4)");
  return f;
}

}  // namespace

MethodFamily fp8_family() {
  MethodFamily f;
  f.name = kName;
  f.summary =
      "FP8 codes (e4m3 or e5m2, CUDA's satfinite rounding) times fp32 scales per tensor, head or channel; "
      "dynamic or calibrated on the first tokens (default: the first half, not evaluated)";
  f.keys = {{"kfmt", "e4m3", "keys' format: e4m3 (max 448) or e5m2 (max 57344)"},
            {"vfmt", "e4m3", "values' format: e4m3 or e5m2 (fmt=X sets both)"},
            {"scale", "head", "one fp32 scale per tensor, head, or (head, channel)"},
            {"calib", "dynamic",
             "dynamic: absmax of all tokens; max or percentile:P: |x| over the calibration tokens"},
            {"calib_tokens", "half",
             "calibration tokens: the first floor(T/2) ('half') or the first n; evaluated: the rest"}};
  f.presets = {{"fp8-e4m3", "fp8:kfmt=e4m3,vfmt=e4m3,scale=head,calib=dynamic,calib_tokens=half",
                "FP8 E4M3 keys and values, fp32 absmax scale per head"}};
  f.parse = [](const std::string& args) -> MethodPtr {
    Fp8Params p;
    for (const auto& [key, value] : text::split_pairs(args, "method spec")) {
      switch (text::choose(key, kName + " key", {"kfmt", "vfmt", "fmt", "scale", "calib", "calib_tokens"})) {
        case 0: p.k = parse_fp8(value, key); break;
        case 1: p.v = parse_fp8(value, key); break;
        case 2: p.k = p.v = parse_fp8(value, key); break;
        case 3: p.scale = parse_enum<FloatScale>(value, key); break;
        case 4: p.calib = parse_calib(value); break;
        default:
          p.calib_tokens = value == "half" ? 0 : text::parse_int(value, key);
          if (value != "half" && p.calib_tokens < 1)
            throw std::invalid_argument("calib_tokens=" + value + " must be 'half' or a count >= 1");
      }
    }
    return std::make_shared<const Fp8>(p);
  };
  return f;
}

}  // namespace kvlab::methods
