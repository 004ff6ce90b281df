// Shapes and offsets of the packed formats (docs/FORMATS.md), shared by quantize and dequantize.
#pragma once
#include <cstdint>

#include "kvlab/pack.h"
#include "kvlab/quantizer.h"

namespace kvlab::detail {

struct Layout {
  int64_t N, T, D;    // slices, tokens, channels
  int64_t R, L;       // rows and row length: (D, T) for axis=channel, (T, D) for axis=token
  int64_t G;          // group size along the row
  int64_t groups;     // groups per row: ceil(L / G)
  int64_t row_bytes;  // packed bytes per row (plain format)
  int bits;
  bool channel;  // axis=channel: rows are channels
  // boost pages (axis=channel): P pages of G tokens, the last one possibly shorter
  int64_t P = 0, last = 0, k = 0;
  int64_t full_low = 0, last_low = 0, full_high = 0, last_high = 0;

  Layout(const QuantizedTensor& q) {
    const auto& s = q.shape;
    T = s[s.size() - 2];
    D = s.back();
    N = 1;
    for (size_t i = 0; i + 2 < s.size(); ++i) N *= s[i];
    channel = q.spec.axis == Axis::Channel;
    R = channel ? D : T;
    L = channel ? T : D;
    G = q.group;
    groups = (L + G - 1) / G;
    bits = q.spec.bits;
    row_bytes = packed_bytes(L, bits);
    if (q.spec.boosted()) {
      P = groups;
      last = T - (P - 1) * G;
      k = q.boost_k;
      full_low = D * packed_bytes(G, bits);
      last_low = D * packed_bytes(last, bits);
      full_high = k * packed_bytes(G, 2);
      last_high = k * packed_bytes(last, 2);
    }
  }
  int64_t page_tokens(int64_t p) const { return p + 1 < P ? G : last; }
  // boost: bytes of one slice, and the offset of page p inside it
  int64_t slice_low() const { return (P - 1) * full_low + last_low; }
  int64_t slice_high() const { return (P - 1) * full_high + last_high; }
  int64_t page_low(int64_t p) const { return p * full_low; }
  int64_t page_high(int64_t p) const { return p * full_high; }
  // element (n, t, c) of the input
  int64_t elem(int64_t n, int64_t t, int64_t c) const { return (n * T + t) * D + c; }
};

}  // namespace kvlab::detail
