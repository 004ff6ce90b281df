// Internal: stored dtype <-> fp32 for dump I/O. fp16 runs come from core (kvlab/half_rows.h);
// bf16 is the top half of the fp32 bits, rounded to nearest even.
#pragma once
#include <cstdint>

#include "kvlab/half.h"
#include "kvlab/half_rows.h"

namespace kvlab::detail {

using kvlab::float_to_half_n;
using kvlab::half_to_float_n;
using kvlab::round_to_half_n;

inline float bf16_to_float(uint16_t b) { return bits_float((uint32_t)b << 16); }
inline uint16_t float_to_bf16(float f) {  // finite inputs only (dumps are checked finite first)
  const uint32_t u = float_bits(f);
  return (uint16_t)((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}

}  // namespace kvlab::detail
