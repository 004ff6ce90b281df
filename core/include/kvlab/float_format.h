// Scaled floating-point formats (FP8 E4M3/E5M2 with fp32 scales; NVFP4 and MXFP4 with block
// scales): the packed geometry and the per-element recipe, shared by the CPU reference
// (float_quant.h) and the CUDA kernels (gpu/src/quant_float.cu). C++17 and KV_HD.
// docs/FORMATS.md section 8 writes the arithmetic down.
#pragma once
#include <cstdint>

#include "kvlab/hd.h"
#include "kvlab/minifloat.h"

namespace kvlab {

enum class FloatFormat : int { E4M3, E5M2, NVFP4, MXFP4 };
// FP8 scale granularity: one fp32 scale per tensor, per slice (a KV head) or per (slice, channel).
enum class FloatScale : int { Tensor, Head, Channel };

inline constexpr float kE4M3Max = 448.0f, kE5M2Max = 57344.0f, kE2M1Max = 6.0f;

struct FloatLayout {
  int64_t N = 0, T = 0, D = 0;  // slices, tokens, channels of the input (..., T, D)
  FloatFormat format = FloatFormat::E4M3;
  FloatScale scale = FloatScale::Head;  // fp8 only

  KV_HD bool fp4() const { return format == FloatFormat::NVFP4 || format == FloatFormat::MXFP4; }
  KV_HD bool e5m2() const { return format == FloatFormat::E5M2; }
  // fp4: elements per block scale, along the channels of one token (the last block of a row
  // holds D mod B when B does not divide D)
  KV_HD int block() const { return format == FloatFormat::NVFP4 ? 16 : 32; }
  KV_HD int64_t blocks() const { return (D + block() - 1) / block(); }
  // bytes of one token row of codes: fp8 one per element; fp4 two per byte, element 2i in the
  // low nibble (LSB first, as section 2.1's stream)
  KV_HD int64_t row_bytes() const { return fp4() ? (D + 1) / 2 : D; }
  KV_HD int64_t codes_bytes() const { return N * T * row_bytes(); }
  KV_HD int64_t block_scale_bytes() const { return fp4() ? N * T * blocks() : 0; }
  // fp32 scales: fp8 per tensor, slice or (slice, channel); NVFP4 one tensor scale; MXFP4 none
  KV_HD int64_t n_scales() const {
    if (format == FloatFormat::MXFP4) return 0;
    if (format == FloatFormat::NVFP4 || scale == FloatScale::Tensor) return 1;
    return scale == FloatScale::Head ? N : N * D;
  }
  // the fp32 scale of element (n, ., c) (fp8 and NVFP4)
  KV_HD int64_t scale_index(int64_t n, int64_t c) const {
    if (fp4() || scale == FloatScale::Tensor) return 0;
    return scale == FloatScale::Head ? n : n * D + c;
  }
  KV_HD double payload_bits() const {
    return (double)N * T * D * (fp4() ? 4 : 8) + (double)block_scale_bytes() * 8 + (double)n_scales() * 32;
  }
};

// ---- FP8: code = fp8(x / s), x_hat = fp8value * s; s = absmax / max (1 for an all-zero group).
KV_HD float fp8_max(bool e5m2) { return e5m2 ? kE5M2Max : kE4M3Max; }
KV_HD float fp8_scale(float absmax, bool e5m2) {
  const float s = f_div(absmax, fp8_max(e5m2));
  return s == 0.0f ? 1.0f : s;  // all zero (or absmax below 2^-140): any scale gives zeros
}
KV_HD uint8_t fp8_code(float x, float s, bool e5m2) { return float_to_fp8(f_div(x, s), e5m2); }
KV_HD float fp8_dequant(uint8_t c, float s, bool e5m2) { return f_mul(fp8_to_float(c, e5m2), s); }

// ---- NVFP4: tensor scale s_t = amax / (448 * 6); block scale code = e4m3(amax_b / 6 / s_t);
// element code = e2m1(x / (e4m3value * s_t)), 0 when that product is 0.
KV_HD float nvfp4_tensor_scale(float amax) {
  const float s = f_div(amax, kE4M3Max * kE2M1Max);
  return s == 0.0f ? 1.0f : s;
}
KV_HD uint8_t nvfp4_block_code(float block_amax, float s_t) {
  return float_to_fp8(f_div(f_div(block_amax, kE2M1Max), s_t), false);
}
KV_HD float nvfp4_block_scale(uint8_t code, float s_t) { return f_mul(fp8_to_float(code, false), s_t); }

// ---- MXFP4 (OCP MX v1.0): X = 2^(floor(log2 amax) - 2) as E8M0 (exponent clamped to
// [-127, 127]; an all-zero block gets code 0); element code = e2m1(x / X).
KV_HD uint8_t mxfp4_block_code(float block_amax) {
  if (block_amax == 0.0f) return 0;
  const int e = floor_log2(block_amax) - 2 + 127;
  return (uint8_t)(e < 0 ? 0 : e > 254 ? 254 : e);
}
KV_HD float mxfp4_block_scale(uint8_t code) { return e8m0_to_float(code); }

// Both FP4 formats: the element code under block scale S, and its value.
KV_HD uint8_t fp4_code(float x, float S) { return float_to_fp4(S == 0.0f ? 0.0f : f_div(x, S)); }
KV_HD float fp4_dequant(uint8_t c, float S) { return f_mul(fp4_to_float(c), S); }

}  // namespace kvlab
