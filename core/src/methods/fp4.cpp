// fp4: keys and values as FP4 E2M1 codes with block scales along each token's channels:
// NVFP4 (blocks of 16, E4M3 block scale, one fp32 tensor scale per head and role) or MXFP4
// (OCP MX v1.0: blocks of 32, E8M0 power-of-two block scale); every token quantized, scales
// from the tokens themselves. Arithmetic: float_format.h, docs/FORMATS.md section 8.
#include "kvlab/kv_text.h"
#include "uniform.h"

namespace kvlab::methods {
namespace {

const std::string kName = "fp4";

class Fp4 final : public Method {
 public:
  explicit Fp4(FloatFormat f) : f_(f) {}
  const std::string& family() const override { return kName; }
  std::string spec() const override { return kName + ":fmt=" + (f_ == FloatFormat::NVFP4 ? "nv" : "mx"); }
  Schedule schedule(int64_t T) const override { return every_token(T); }
  Bits bits(int64_t T, int64_t D) const override {
    const double b = float_packed_bits({T, D}, {f_}) / (double)(T * D);
    return {b, b};
  }
  // MXFP4's scales are per block of one token: a token is quantized as it arrives. NVFP4's fp32
  // tensor scale is the absmax of the whole head, which a decoding cache does not have yet.
  Schedule decode_schedule(int64_t n) const override {
    if (f_ == FloatFormat::NVFP4)
      throw std::invalid_argument("method '" + spec() +
                                  "' cannot be decoded: NVFP4's tensor scale is the absmax of every token of "
                                  "the head, which a decoding cache does not have yet; use fp4:fmt=mx");
    return every_token(n);
  }
  Reconstruction apply(const TensorView& k, const TensorView& v, const HeadContext& at) const override {
    check_inputs(k, v);
    return {float_roundtrip(k, {f_}, {}, at.codec), float_roundtrip(v, {f_}, {}, at.codec)};
  }

 private:
  FloatFormat f_;
};

}  // namespace

MethodFamily fp4_family() {
  MethodFamily f;
  f.name = kName;
  f.summary =
      "FP4 E2M1 codes with block scales per token: NVFP4 (16, E4M3, fp32 tensor scale) or MXFP4 (32, E8M0)";
  f.keys = {{"fmt", "nv", "nv: NVFP4, 16 values per E4M3 scale and a tensor scale; mx: MXFP4, 32 per E8M0"}};
  f.presets = {{"nvfp4", "fp4:fmt=nv", "NVFP4 keys and values: 4 + 8/16 bits, fp32 tensor scale per head"},
               {"mxfp4", "fp4:fmt=mx", "MXFP4 keys and values (OCP MX v1.0): 4 + 8/32 bits"}};
  f.parse = [](const std::string& args) -> MethodPtr {
    FloatFormat fmt = FloatFormat::NVFP4;
    for (const auto& [key, value] : text::split_pairs(args, "method spec")) {
      text::choose(key, kName + " key", {"fmt"});
      fmt = text::choose(value, key, {"nv", "mx"}) == 0 ? FloatFormat::NVFP4 : FloatFormat::MXFP4;
    }
    return std::make_shared<const Fp4>(fmt);
  };
  return f;
}

}  // namespace kvlab::methods
