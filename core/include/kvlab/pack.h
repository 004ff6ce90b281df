// Bit-stream packing shared by host and device: code i of a row occupies bits
// [i*bits, (i+1)*bits) of the row's byte stream, least significant bit first.
// Rows start on a byte boundary; the last byte of a row is zero-padded.
#pragma once
#include <cstddef>
#include <cstdint>

#include "kvlab/hd.h"

namespace kvlab {

KV_HD int64_t packed_bytes(int64_t n_codes, int bits) { return (n_codes * bits + 7) / 8; }

// OR `code` into the stream at code index i (the stream must start zeroed).
KV_HD void put_code(uint8_t* row, int64_t i, int bits, uint32_t code) {
  const int64_t bit = i * bits;
  const uint32_t v = code << (bit & 7);
  row[bit >> 3] |= (uint8_t)(v & 0xffu);
  if ((bit & 7) + bits > 8) row[(bit >> 3) + 1] |= (uint8_t)(v >> 8);
}

KV_HD uint32_t get_code(const uint8_t* row, int64_t i, int bits) {
  const int64_t bit = i * bits;
  uint32_t v = row[bit >> 3];
  if ((bit & 7) + bits > 8) v |= (uint32_t)row[(bit >> 3) + 1] << 8;
  return (v >> (bit & 7)) & ((1u << bits) - 1u);
}

// Register-level packing on the same LSB-first stream, for widths that divide 8 or 32: code j
// of a run of 32/bits codes lands at bits [j*bits, (j+1)*bits) of a 32-bit word, i.e. the
// little-endian word holds stream bytes 4w..4w+3 exactly as put_code writes them (likewise a
// byte for 8/bits codes). Codes must already fit in `bits` bits.
KV_HD uint32_t pack_code_into(uint32_t word, int j, int bits, uint32_t code) {
  return word | (code << (j * bits));
}
template <int BITS, int N>
KV_HD uint32_t pack_codes(const uint32_t (&codes)[N]) {
  static_assert(BITS * N <= 32, "pack_codes: more bits than a word");
  uint32_t w = 0;
#if defined(__CUDA_ARCH__)
#pragma unroll
#endif
  for (int j = 0; j < N; ++j) w |= codes[j] << (j * BITS);
  return w;
}
// Code j of a packed word (the inverse of pack_codes).
KV_HD uint32_t word_code(uint32_t word, int j, int bits) {
  return (word >> (j * bits)) & ((1u << bits) - 1u);
}

// Pack n codes into a zeroed row.
inline void pack_row(const uint8_t* codes, int64_t n, int bits, uint8_t* row) {
  if (bits == 8) {
    for (int64_t i = 0; i < n; ++i) row[i] = codes[i];
    return;
  }
  if (8 % bits == 0) {  // 1, 2, 4: whole codes per byte
    const int per = 8 / bits;
    const int64_t full = n / per;
    for (int64_t b = 0; b < full; ++b) {
      uint32_t v = 0;
      for (int j = 0; j < per; ++j) v |= (uint32_t)codes[b * per + j] << (j * bits);
      row[b] = (uint8_t)v;
    }
    for (int64_t i = full * per; i < n; ++i) put_code(row, i, bits, codes[i]);
    return;
  }
  for (int64_t i = 0; i < n; ++i) put_code(row, i, bits, codes[i]);
}

inline void unpack_row(const uint8_t* row, int64_t n, int bits, uint8_t* codes) {
  for (int64_t i = 0; i < n; ++i) codes[i] = (uint8_t)get_code(row, i, bits);
}

}  // namespace kvlab
