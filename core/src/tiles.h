// Host-side tile helpers for the CPU reference loops: exact fp16 -> fp32 conversion of a run
// of elements, and (un)packing a token-major tile of codes into per-channel rows. They only
// move bits; the arithmetic stays in recipe.h.
#pragma once
#include <cstdint>
#include <cstring>

#include "kvlab/half.h"
#include "kvlab/half_rows.h"
#include "kvlab/pack.h"

namespace kvlab::detail {

// Exact conversion (every fp16 value is a float), so any implementation gives the same bits.
inline void load_floats(const uint16_t* in, float* out, int64_t n) { half_to_float_n(in, out, n); }
inline void load_floats(const float* in, float* out, int64_t n) { std::memcpy(out, in, n * sizeof(float)); }

// Codes of a tile laid out [len tokens][D channels] -> rows of D channels, starting at token
// t0 of each row. Widths dividing 8 at a byte-aligned start take the vectorizable path.
inline void pack_tile(const uint8_t* tile, int64_t len, int64_t D, int bits, uint8_t* rows, int64_t row_bytes,
                      int64_t t0, uint8_t* scratch /* D * packed_bytes(len, bits) */) {
  if (8 % bits == 0 && (t0 * bits) % 8 == 0) {
    const int per = 8 / bits;
    const int64_t full = len / per;
    for (int64_t j = 0; j < full; ++j) {
      uint8_t* s = scratch + j * D;
      const uint8_t* src = tile + j * per * D;
      for (int64_t c = 0; c < D; ++c) {
        uint32_t v = 0;
        for (int k = 0; k < per; ++k) v |= (uint32_t)src[k * D + c] << (k * bits);
        s[c] = (uint8_t)v;
      }
    }
    for (int64_t c = 0; c < D; ++c) {
      uint8_t* row = rows + c * row_bytes + t0 * bits / 8;
      for (int64_t j = 0; j < full; ++j) row[j] = scratch[j * D + c];
      for (int64_t t = full * per; t < len; ++t) put_code(row, t, bits, tile[t * D + c]);
    }
    return;
  }
  for (int64_t c = 0; c < D; ++c)
    for (int64_t t = 0; t < len; ++t) put_code(rows + c * row_bytes, t0 + t, bits, tile[t * D + c]);
}

// Inverse of pack_tile: rows of D channels -> tile [len tokens][D channels].
inline void unpack_tile(const uint8_t* rows, int64_t row_bytes, int64_t t0, int64_t len, int64_t D, int bits,
                        uint8_t* tile, uint8_t* scratch) {
  if (8 % bits == 0 && (t0 * bits) % 8 == 0) {
    const int per = 8 / bits;
    const int64_t full = len / per;
    const uint32_t mask = (1u << bits) - 1u;
    for (int64_t c = 0; c < D; ++c) {
      const uint8_t* row = rows + c * row_bytes + t0 * bits / 8;
      for (int64_t j = 0; j < full; ++j) scratch[j * D + c] = row[j];
      for (int64_t t = full * per; t < len; ++t) tile[t * D + c] = (uint8_t)get_code(row, t, bits);
    }
    for (int64_t j = 0; j < full; ++j)
      for (int k = 0; k < per; ++k) {
        uint8_t* dst = tile + (j * per + k) * D;
        const uint8_t* s = scratch + j * D;
        for (int64_t c = 0; c < D; ++c) dst[c] = (uint8_t)((s[c] >> (k * bits)) & mask);
      }
    return;
  }
  for (int64_t c = 0; c < D; ++c)
    for (int64_t t = 0; t < len; ++t) tile[t * D + c] = (uint8_t)get_code(rows + c * row_bytes, t0 + t, bits);
}

}  // namespace kvlab::detail
