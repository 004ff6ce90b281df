// Rotary position embedding as kvlab's runner applies it (models/src/transformer_math.cpp):
// methods that quantize keys before RoPE (kvquant) rotate their dequantized keys with it, so
// they compare against the dumped post-RoPE keys.
#pragma once
#include <cstdint>

#include "kvlab/enum_names.h"

namespace kvlab {

// adjacent: rotate pairs (2i, 2i+1) as llama2.c and Meta's code; halves: (i, i + D/2) as Hugging Face.
enum class RopeStyle { None, Adjacent, Halves };
template <>
struct EnumNames<RopeStyle> {
  static constexpr EnumName<RopeStyle> names[] = {
      {RopeStyle::None, "none"}, {RopeStyle::Adjacent, "adjacent"}, {RopeStyle::Halves, "halves"}};
};
inline const char* to_string(RopeStyle s) { return enum_name(s); }

// Rotates the T rows of x (T, D), row t at position first_pos + t, in place, in fp32: frequency
// 1 / theta^(2i / D) and angle pos * freq as run.c and transformers' default RoPE (the runner's
// exact arithmetic, so RoPE(k_pre_rope) of a kvlab dump gives its k bit for bit). None: no-op.
void apply_rope(float* x, int64_t T, int64_t D, RopeStyle style, float theta, int64_t first_pos = 0);

}  // namespace kvlab
