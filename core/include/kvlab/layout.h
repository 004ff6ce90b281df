// The geometry of one packed tensor (docs/FORMATS.md), built once from (shape, spec) by
// make_layout (quantizer.h) and read by everything that touches the bytes: the CPU reference
// loops, the CUDA kernels (the GPU's format is this struct plus device pointers) and the bit
// accounting of the KV methods. C++17 and KV_HD, so nvcc compiles it for the device.
#pragma once
#include <cstdint>

#include "kvlab/hd.h"
#include "kvlab/pack.h"

namespace kvlab {

struct PackedLayout {
  int64_t N = 0, T = 0, D = 0;  // slices (product of the leading dims), tokens, channels
  int G = 0;                    // resolved group size along a row (boost: tokens per page)
  int bits = 0;                 // code width (boost: of the low plane)
  int sym = 0;                  // scheme=sym: scales only, no zero array
  int channel = 1;              // axis=channel: rows are channels and groups run along tokens
  int half_params = 0;          // scales and zeros stored as fp16 (else fp32)
  int boost = 0;                // Kitty key pages: low plane + 2-bit high plane + channel index
  int k = 0;                    // boost: boosted channels per page
  int64_t groups = 0;           // groups per row: ceil(row_len / G) (boost: pages)
  int64_t row_bytes = 0;        // plain formats: packed bytes per row

  KV_HD int64_t rows() const { return channel ? D : T; }
  KV_HD int64_t row_len() const { return channel ? T : D; }
  // element (n, t, c) of the input (..., T, D)
  KV_HD int64_t elem(int64_t n, int64_t t, int64_t c) const { return (n * T + t) * D + c; }

  // Boost pages: G tokens each, the last one possibly shorter, stored page-major per slice.
  KV_HD int64_t last() const { return T - (groups - 1) * G; }
  KV_HD int64_t page_tokens(int64_t p) const { return p + 1 < groups ? G : last(); }
  KV_HD int64_t page_low_bytes(int64_t len) const { return D * packed_bytes(len, bits); }
  KV_HD int64_t page_high_bytes(int64_t len) const { return k * packed_bytes(len, 2); }
  KV_HD int64_t slice_low() const {
    return (groups - 1) * D * packed_bytes(G, bits) + D * packed_bytes(last(), bits);
  }
  KV_HD int64_t slice_high() const {
    return (groups - 1) * k * packed_bytes(G, 2) + k * packed_bytes(last(), 2);
  }
  KV_HD int64_t page_low(int64_t p) const { return p * page_low_bytes(G); }
  KV_HD int64_t page_high(int64_t p) const { return p * page_high_bytes(G); }

  // Sizes of the parts: codes (boost: the low plane), high plane, channel index, and the
  // number of scales (as many zeros unless sym).
  KV_HD int64_t codes_bytes() const { return boost ? N * slice_low() : N * rows() * row_bytes; }
  KV_HD int64_t high_bytes() const { return boost ? N * slice_high() : 0; }
  KV_HD int64_t index_bytes() const { return boost ? N * groups * D : 0; }
  KV_HD int64_t n_params() const { return boost ? N * groups * D : N * rows() * groups; }
  KV_HD int64_t param_size() const { return half_params ? 2 : 4; }
  KV_HD bool has_zero() const { return !sym; }

  // Bits the format spends: every code at its nominal width (row padding not counted), the
  // boosted channels' 2 high bits, one index byte per (page, channel), scales and zeros.
  KV_HD double payload_bits() const {
    double b = (double)N * T * D * bits + (double)n_params() * param_size() * 8 * (has_zero() ? 2 : 1);
    if (boost) b += (double)N * k * T * 2 + (double)index_bytes() * 8;
    return b;
  }
};

}  // namespace kvlab
