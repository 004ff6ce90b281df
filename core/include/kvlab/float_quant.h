// CPU reference of the scaled floating-point formats (float_format.h): spec strings, scales
// (dynamic absmax, or calibrated on other tokens), quantize + pack, dequantize. The GPU kernels
// (gpu/src/quant_float.cu) reproduce these bytes. Arithmetic: docs/FORMATS.md section 8.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "kvlab/enum_names.h"
#include "kvlab/float_format.h"
#include "kvlab/tensor.h"

namespace kvlab {

template <>
struct EnumNames<FloatFormat> {
  static constexpr EnumName<FloatFormat> names[] = {{FloatFormat::E4M3, "e4m3"},
                                                    {FloatFormat::E5M2, "e5m2"},
                                                    {FloatFormat::NVFP4, "nvfp4"},
                                                    {FloatFormat::MXFP4, "mxfp4"}};
};
template <>
struct EnumNames<FloatScale> {
  static constexpr EnumName<FloatScale> names[] = {
      {FloatScale::Tensor, "tensor"}, {FloatScale::Head, "head"}, {FloatScale::Channel, "channel"}};
};

// `fmt=e4m3|e5m2|nvfp4|mxfp4[,scale=tensor|head|channel]` (scale: fp8 only, default head).
struct FloatSpec {
  FloatFormat format = FloatFormat::E4M3;
  FloatScale scale = FloatScale::Head;
  bool fp8() const { return format == FloatFormat::E4M3 || format == FloatFormat::E5M2; }
  bool operator==(const FloatSpec&) const = default;
};
FloatSpec parse_float_spec(const std::string& text);
std::string to_string(const FloatSpec& s);  // canonical: fmt=e4m3,scale=head / fmt=nvfp4

// How fp32 scales are chosen from calibration values: the absmax of each scale's group, or
// the p-th percentile of its |x| (nearest rank: the ceil(p/100 * n)-th smallest).
struct Calibration {
  double percentile = 100.0;  // 100: absmax
};

// Geometry of x (..., T, D) under s; std::invalid_argument for an empty or rank < 2 shape.
FloatLayout make_float_layout(const std::vector<int64_t>& shape, const FloatSpec& s);

struct FloatQuantized {
  FloatSpec spec;
  std::vector<int64_t> shape;
  std::vector<uint8_t> codes;        // (N, T, row_bytes)
  std::vector<float> scale;          // n_scales() fp32 values
  std::vector<uint8_t> block_scale;  // fp4: (N, T, blocks) E4M3 or E8M0 codes
};

// The fp32 scales (FloatLayout::n_scales()) that quantize_float would use for x, chosen from
// the values of `calib` (same shape as x but for T): fp8 per group, NVFP4 the tensor scale
// (percentile ignored). Throws std::invalid_argument for non-finite values or mismatched shapes.
std::vector<float> float_scales(const TensorView& calib, const FloatSpec& s, const Calibration& c = {});
// Quantize with scales from x itself (dynamic), or with the given ones (calibrated; finite, > 0).
FloatQuantized quantize_float(const TensorView& x, const FloatSpec& s);
FloatQuantized quantize_float(const TensorView& x, const FloatSpec& s, const std::vector<float>& scales);
// Throws std::invalid_argument unless there are n_scales() scales, each finite and > 0.
void check_float_scales(const std::vector<float>& scales, const FloatLayout& L, const FloatSpec& s);
std::vector<float> dequantize_float(const FloatQuantized& q);
std::vector<uint16_t> dequantize_float_half(const FloatQuantized& q);  // fp32 result rounded to fp16
// Bits spent by a tensor of `shape` packed with s: codes, block scales, fp32 scales.
double float_packed_bits(const std::vector<int64_t>& shape, const FloatSpec& s);

}  // namespace kvlab
