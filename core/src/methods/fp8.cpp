// fp8: keys and values as FP8 codes (e4m3 or e5m2) times one fp32 scale per head and role,
// scale = absmax / fp8_max; every token quantized. The codes round to nearest-even on the fp8
// grid (subnormals included) and saturate at +-max; pure fp32 operations, so the bytes do not
// depend on the compiler (the build also forbids FMA contraction).
#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "kvlab/enum_names.h"
#include "kvlab/kv_text.h"
#include "uniform.h"

namespace kvlab {
namespace methods {
enum class Fp8Format { E4M3, E5M2 };
}  // namespace methods

template <>
struct EnumNames<methods::Fp8Format> {
  static constexpr EnumName<methods::Fp8Format> names[] = {{methods::Fp8Format::E4M3, "e4m3"},
                                                           {methods::Fp8Format::E5M2, "e5m2"}};
};

namespace methods {
namespace {

const std::string kName = "fp8";

// The finite grid of a format (OCP FP8: e4m3 has no infinities, so its max is 448).
struct Fp8Grid {
  int mantissa_bits;
  int min_exponent;  // of the smallest normal binade; subnormals share its spacing
  float max;
};
Fp8Grid grid_of(Fp8Format f) {
  return f == Fp8Format::E4M3 ? Fp8Grid{3, -6, 448.0f} : Fp8Grid{2, -14, 57344.0f};
}

// y on the grid: nearest, ties to even (the default rounding mode of nearbyint), saturated.
float round_to_grid(float y, const Fp8Grid& g) {
  const float a = std::fabs(y);
  if (!(a < g.max)) return std::copysign(g.max, y);
  int e = 0;
  std::frexp(a, &e);  // a = m * 2^e with m in [0.5, 1): a's binade is 2^(e - 1)
  const int step = std::max(e - 1, g.min_exponent) - g.mantissa_bits;
  // scaling by powers of two is exact, so the only rounding is nearbyint's
  const float q = std::ldexp(std::nearbyint(std::ldexp(a, -step)), step);
  return std::copysign(std::min(q, g.max), y);
}

// Every slice (one KV head) of x with its own absmax scale.
Tensor quantize_role(const TensorView& x, Fp8Format f) {
  const Fp8Grid g = grid_of(f);
  const int64_t T = x.shape[x.shape.size() - 2], D = x.shape.back(), len = T * D, N = x.numel() / len;
  Tensor out;
  out.shape = x.shape;
  out.data.resize(x.numel());
  load(x, 0, x.numel(), out.data.data());
  for (int64_t n = 0; n < N; ++n) {
    float* p = &out.data[n * len];
    float absmax = 0.0f;
    for (int64_t i = 0; i < len; ++i) absmax = std::max(absmax, std::fabs(p[i]));
    const float scale = absmax == 0.0f ? 1.0f : absmax / g.max;
    if (scale == 0.0f)
      throw std::invalid_argument("fp8: absmax " + text::format_double(absmax) +
                                  " of a head is too small for an fp32 scale");
    for (int64_t i = 0; i < len; ++i) p[i] = round_to_grid(p[i] / scale, g) * scale;
  }
  return out;
}

class Fp8 final : public Method {
 public:
  Fp8(Fp8Format k, Fp8Format v) : k_(k), v_(v) {}
  const std::string& family() const override { return kName; }
  std::string spec() const override { return kName + ":kfmt=" + enum_name(k_) + ",vfmt=" + enum_name(v_); }
  Schedule schedule(int64_t T) const override { return every_token(T); }
  Bits bits(int64_t T, int64_t D) const override {
    const double b = 8.0 + 32.0 / (double)(T * D);  // 8-bit codes and one fp32 scale per head
    return {b, b};
  }
  Reconstruction apply(const TensorView& k, const TensorView& v, const HeadContext&) const override {
    check_inputs(k, v);
    return {quantize_role(k, k_), quantize_role(v, v_)};
  }

 private:
  Fp8Format k_, v_;
};

}  // namespace

MethodFamily fp8_family() {
  MethodFamily f;
  f.name = kName;
  f.summary = "FP8 codes (e4m3 or e5m2) with one fp32 absmax scale per head and role, every token";
  f.keys = {{"kfmt", "e4m3", "keys' format: e4m3 (max 448) or e5m2 (max 57344)"},
            {"vfmt", "e4m3", "values' format: e4m3 or e5m2"}};
  f.presets = {
      {"fp8-e4m3", "fp8:kfmt=e4m3,vfmt=e4m3", "FP8 E4M3 keys and values, fp32 absmax scale per head"}};
  f.parse = [](const std::string& args) -> MethodPtr {
    Fp8Format k = Fp8Format::E4M3, v = Fp8Format::E4M3;
    for (const auto& [key, value] : text::split_pairs(args, "method spec")) {
      text::choose(key, kName + " key", {"kfmt", "vfmt"});
      (key == "kfmt" ? k : v) = parse_enum<Fp8Format>(value, key);
    }
    return std::make_shared<const Fp8>(k, v);
  };
  return f;
}

}  // namespace methods
}  // namespace kvlab
