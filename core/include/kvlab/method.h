// KV-cache methods: a key quantizer, a value quantizer and a schedule of full-precision tokens.
// Spec strings: a preset name (`kivi-2`) or `family:key=value,...`; see `kvlab methods`.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "kvlab/spec.h"
#include "kvlab/tensor.h"

namespace kvlab {

enum class Family { Fp16, Int8, Kivi, Kitty };

struct MethodSpec {
  Family family = Family::Kivi;
  int kbits = 2;                      // key code bits (kivi, kitty)
  int vbits = 2;                      // value code bits (kivi, kitty)
  int group = 128;                    // G: keys per channel in groups (kitty: pages) of G tokens;
                                      //    int8: tokens per scale (kWholeAxis = whole sequence)
  int vgroup = kWholeAxis;            // values per token in groups of this many channels (all = D)
  int sink = 0;                       // S: the first S tokens stay in full precision
  int residual = 128;                 // R: the newest R values stay in full precision
  double boost = -1.0;                // kitty: share of key channels at kbits + 2 per page
  ParamType params = ParamType::F16;  // scale/zero storage
  Profile profile = Profile::Kvlab;   // arithmetic recipe of both quantizers

  bool operator==(const MethodSpec&) const = default;
};

struct Preset {
  std::string name;
  std::string spec;         // canonical spec string
  std::string description;  // one line for `kvlab methods`
};
const std::vector<Preset>& presets();

// Parse a preset name or `family[:key=value,...]`; throws std::invalid_argument listing the
// valid presets, families or keys.
MethodSpec parse_method(const std::string& text);
std::string to_string(const MethodSpec& m);  // canonical; parse_method(to_string(m)) == m
const char* to_string(Family f);

// Quantizers a method applies; value groups of `all` resolve to the head dim D.
QuantizerSpec key_quantizer(const MethodSpec& m);
QuantizerSpec value_quantizer(const MethodSpec& m);

// Token ranges [begin, end) that are quantized after T tokens; all others stay full precision.
struct Schedule {
  int64_t key_begin = 0, key_end = 0;
  int64_t value_begin = 0, value_end = 0;
};
Schedule schedule(const MethodSpec& m, int64_t T);

// Bits per element of one head's cache of T tokens x D channels (codes, scales, zeros, boost
// planes and index, and 16 bits for every full-precision element).
struct Bits {
  double key = 0, value = 0;
  double both() const { return (key + value) / 2.0; }
};
Bits bits_per_element(const MethodSpec& m, int64_t T, int64_t D);

// What the cache holds after T tokens, dequantized to fp32: K and V of shape (..., T, D).
// Full-precision tokens are kept as fp16 (the cache dtype).
struct Reconstruction {
  Tensor k, v;
};
Reconstruction apply_method(const MethodSpec& m, const TensorView& k, const TensorView& v);
// Kitty with the boosted key channels chosen by the caller (channel selection studies):
// key_boost holds k = boost_count(D, m.boost) channels per (slice, page) of the quantized key
// range, P = (key_end - key_begin) / group pages (quantize's boost_channels). Throws for other
// families; with no quantized pages it must be empty.
Reconstruction apply_method(const MethodSpec& m, const TensorView& k, const TensorView& v,
                            const std::vector<int32_t>& key_boost);
// Either form: key_boost null means Kitty's own ranking.
Reconstruction apply_method(const MethodSpec& m, const TensorView& k, const TensorView& v,
                            const std::vector<int32_t>* key_boost);

}  // namespace kvlab
