// Shared by core's method families: input checks, the fp16 cache, bit accounting, and the
// families built on core's uniform quantizers (int8, kivi, kitty) as one Method class driven by
// each family's rules.
#pragma once
#include <string>
#include <vector>

#include "kvlab/float_quant.h"
#include "kvlab/method.h"

namespace kvlab::methods {

// Throws std::invalid_argument for k and v of different or empty shapes, or non-finite values.
void check_inputs(const TensorView& k, const TensorView& v);
// Elements [first, first + n) of x as floats (fp16 converts exactly).
void load(const TensorView& x, int64_t first, int64_t n, float* out);
// The cache as fp16 holds it, widened to fp32.
Tensor full_precision(const TensorView& x);
// Bits per element of one role of one head: n quantized tokens packed with q, T - n in fp16.
double role_bits(const QuantizerSpec& q, int64_t n, int64_t T, int64_t D);
// x through a scaled floating-point format (float_quant.h) and back, as fp32 of x's shape;
// scales: the format's fp32 scales, or empty for scales from x itself (dynamic).
// codec: where it runs (null: here).
Tensor float_roundtrip(const TensorView& x, const FloatSpec& s, const std::vector<float>& scales,
                       const Codec* codec = nullptr);

// Schedules of the uniform families.
Schedule every_token(int64_t T);
// The first `sink` tokens stay fp16; keys in whole groups after them, values all but the newest
// `residual` (kivi, kitty).
Schedule sink_and_residual(const UniformParams& p, int64_t T);
// Why key groups of `all` tokens cannot stream, or "" (kivi, kitty, int8).
std::string whole_sequence_group(const UniformParams& p);

// What a uniform family decides; everything else (parse, print, bits, apply) is shared.
struct UniformRules {
  QuantizerSpec (*key)(const UniformParams&) = nullptr;
  QuantizerSpec (*value)(const UniformParams&) = nullptr;
  Schedule (*schedule)(const UniformParams&, int64_t T) = nullptr;
  // Checks beyond the quantizers' own: why the parameters are invalid, or "".
  std::string (*check)(const UniformParams&) = nullptr;
  // Decoding (Method::decode_schedule): why these parameters cannot stream, or ""; the ranges
  // after n tokens; the tokens apply() must see (null: n).
  std::string (*decode_refusal)(const UniformParams&) = nullptr;
  Schedule (*decode)(const UniformParams&, int64_t n) = nullptr;
  int64_t (*decode_tokens)(const UniformParams&, int64_t n) = nullptr;
};

// The family entry; its keys must be among kbits, vbits, group, vgroup, sink, residual, boost,
// params, profile, rot, rot_roles, each with its default as spec text.
MethodFamily uniform_family(std::string name, std::string summary, std::vector<MethodKey> keys,
                            std::vector<Preset> presets, UniformRules rules);

// kivi's quantizers and keys (kivi.cpp), which kitty extends with boosted key pages.
QuantizerSpec kivi_key(const UniformParams& p);
QuantizerSpec kivi_value(const UniformParams& p);
std::vector<MethodKey> kivi_keys(const std::string& sink_default);
// rot and rot_roles, which every uniform family lists last.
std::vector<MethodKey> rotation_keys();

class UniformMethod final : public Method {
 public:
  // Validates: throws std::invalid_argument naming the method and the problem.
  UniformMethod(std::string family, std::vector<std::string> keys, UniformRules rules, UniformParams p);
  const std::string& family() const override { return family_; }
  std::string spec() const override;
  Schedule schedule(int64_t T) const override { return rules_.schedule(p_, T); }
  Bits bits(int64_t T, int64_t D) const override;
  Schedule decode_schedule(int64_t n) const override;
  int64_t decode_apply_tokens(int64_t n) const override {
    return rules_.decode_tokens ? rules_.decode_tokens(p_, n) : n;
  }
  Reconstruction apply(const TensorView& k, const TensorView& v, const HeadContext& at) const override {
    return apply_with(k, v, nullptr, at.codec);
  }
  void check_model(const ModelShape& m) const override;  // rot=hadamard: head_dim a power of two
  std::optional<QuantizerSpec> key_quantizer() const override { return rules_.key(p_); }
  std::optional<QuantizerSpec> value_quantizer() const override { return rules_.value(p_); }
  const UniformParams* uniform() const override { return &p_; }
  // key_boost: null for the quantizer's own boost ranking, else the caller's channels.
  // codec: where the round trips run (null, or given boost channels: core).
  Reconstruction apply_with(const TensorView& k, const TensorView& v, const std::vector<int32_t>* key_boost,
                            const Codec* codec = nullptr) const;

 private:
  std::string family_;
  std::vector<std::string> keys_;
  UniformRules rules_;
  UniformParams p_;
};

}  // namespace kvlab::methods
