// fp16: no quantization, the cache in fp16 (the reference every method is compared with).
#include "kvlab/kv_text.h"
#include "uniform.h"

namespace kvlab::methods {
namespace {

class Fp16 final : public Method {
 public:
  const std::string& family() const override {
    static const std::string name = "fp16";
    return name;
  }
  std::string spec() const override { return "fp16"; }
  Schedule schedule(int64_t) const override { return {}; }
  Bits bits(int64_t, int64_t) const override { return {16.0, 16.0}; }
  Schedule decode_schedule(int64_t) const override { return {}; }
  int64_t decode_apply_tokens(int64_t) const override { return 0; }
  Reconstruction apply(const TensorView& k, const TensorView& v, const HeadContext&) const override {
    check_inputs(k, v);
    return {full_precision(k), full_precision(v)};
  }
};

}  // namespace

MethodFamily fp16_family() {
  MethodFamily f{"fp16", "no quantization: every token in fp16", {}, {}, nullptr};
  f.presets = {{"fp16", "fp16", "no quantization: the cache in fp16 (reference)"}};
  f.parse = [](const std::string& args) -> MethodPtr {
    for (const auto& [key, value] : text::split_pairs(args, "method spec")) text::choose(key, "fp16 key", {});
    static const MethodPtr m = std::make_shared<const Fp16>();
    return m;
  };
  return f;
}

}  // namespace kvlab::methods
