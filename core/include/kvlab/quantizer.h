// Uniform integer quantization of a tensor (..., T, D): quantize + pack, unpack, dequantize.
// Byte layouts are documented in docs/FORMATS.md; the arithmetic lives in recipe.h.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "kvlab/layout.h"
#include "kvlab/spec.h"
#include "kvlab/tensor.h"

namespace kvlab {

// The result of quantizing a tensor. N = product of the leading dims (batch, heads, ...).
// Rows are the lines along the grouped axis: channels (axis=channel) or tokens (axis=token).
//   plain:  codes (N, R, packed_bytes(L, bits)), scale/zero (N, R, ceil(L / G))
//   boost:  pages of G tokens, page-major: codes = low plane (N, P, D, packed_bytes(Gp, bits)),
//           high (N, P, k, packed_bytes(Gp, 2)), boost_index (N, P, D), scale/zero (N, P, D)
// scale/zero hold fp32 values; with params=fp16 each is exactly an fp16 value.
struct QuantizedTensor {
  QuantizerSpec spec;
  std::vector<int64_t> shape;        // the input shape (..., T, D)
  int group = 0;                     // resolved group size (kWholeAxis replaced by the axis length)
  int boost_k = 0;                   // boosted channels per page
  std::vector<uint8_t> codes;        // packed codes (boost: the low plane)
  std::vector<float> scale;          // one per group
  std::vector<float> zero;           // one per group (asym only; empty for sym)
  std::vector<uint8_t> high;         // boost: high 2 bits of the boosted channels' codes
  std::vector<uint8_t> boost_index;  // boost: channel -> slot in `high`, kNotBoosted otherwise

  int64_t slices() const;  // N
  int64_t tokens() const { return shape[shape.size() - 2]; }
  int64_t dims() const { return shape.back(); }
  int64_t pages() const;  // boost: ceil(T / G)
};

constexpr uint8_t kNotBoosted = 0xFF;

// The packed geometry of a tensor of `shape` under `spec`: the one place shapes are checked, for
// the CPU and the GPU alike. Throws std::invalid_argument for an invalid spec, a shape that is
// not (..., T, D) or is empty, a group larger than its axis, or more boosted channels than the
// uint8 index can name.
PackedLayout make_layout(const std::vector<int64_t>& shape, const QuantizerSpec& spec);
PackedLayout layout_of(const QuantizedTensor& q);

// The shapes under which the parts are handed out (`kvlab quantize`'s .npz, the Python
// package): the input's leading dims, then plain: codes (R, row bytes), scale/zero (R, groups);
// boost: codes and high flat (bytes), boost_index and scale/zero (P, D).
struct PartShapes {
  std::vector<int64_t> codes, high, boost_index, params;
};
PartShapes part_shapes(const QuantizedTensor& q);
// make_layout's checks, then finite input values (`who` prefixes the messages); the layout.
PackedLayout check_input(const TensorView& x, const QuantizerSpec& spec, const std::string& who = "quantize");

// Quantize and pack. Throws std::invalid_argument for an invalid spec, a group of 0 or larger
// than its axis, an empty tensor, NaN/Inf input, or scales that overflow their storage type.
QuantizedTensor quantize(const TensorView& x, const QuantizerSpec& spec);
// Kitty pages with the boosted channels chosen by the caller instead of by mean |x| (channel
// selection studies): boost_channels holds k = boost_count(D, spec.boost) distinct channels per
// (slice, page), row n * P + p, in any order. The bytes are what quantize() writes when its own
// ranking picks the same channels. Throws std::invalid_argument for a spec without boost, a
// wrong count, or a channel out of range or repeated.
QuantizedTensor quantize(const TensorView& x, const QuantizerSpec& spec,
                         const std::vector<int32_t>& boost_channels);

// Integer codes in the input's layout (..., T, D); boosted channels carry their full code.
std::vector<uint8_t> unpack_codes(const QuantizedTensor& q);

// Dequantize into fp32 (or fp16 bits: each value is the fp32 result rounded to nearest even),
// in the input's layout. The pointer forms write numel(q.shape) values into caller memory.
std::vector<float> dequantize(const QuantizedTensor& q);
std::vector<uint16_t> dequantize_half(const QuantizedTensor& q);
void dequantize(const QuantizedTensor& q, float* out);
void dequantize_half(const QuantizedTensor& q, uint16_t* out);

// Bits spent by a tensor of `shape` (..., T, D) packed with `spec`: codes, high plane, index,
// scales, zeros. The one formula behind both functions below and the methods' accounting.
double packed_bits(const std::vector<int64_t>& shape, const QuantizerSpec& spec);
// Bits spent per element by this quantized tensor: packed_bits / elements.
double bits_per_element(const QuantizedTensor& q);

}  // namespace kvlab
