// Pinned scalar arithmetic shared by the CPU reference and the CUDA kernels.
// Every operation rounds once, to nearest even; nothing is contracted into an FMA.
// Host code must be compiled with -ffp-contract=off (CMake sets it for every target).
#pragma once
#include <cmath>
#include <cstdint>

#if defined(__CUDACC__)
#define KV_HD __host__ __device__ __forceinline__
#else
#define KV_HD inline
#endif

namespace kvlab {

KV_HD float f_add(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}
KV_HD float f_sub(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fsub_rn(a, b);
#else
  return a - b;
#endif
}
KV_HD float f_mul(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}
KV_HD float f_div(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fdiv_rn(a, b);
#else
  return a / b;
#endif
}
// Round to the nearest integer, ties to even (the default IEEE rounding mode).
KV_HD float f_rint(float a) {
#if defined(__CUDA_ARCH__)
  return rintf(a);
#else
  return __builtin_rintf(a);
#endif
}
// min/max over a total order with -0 < +0 (inputs are finite: NaN is rejected earlier), so
// they are commutative and associative and any reduction order (a GPU tree, SIMD lanes)
// returns the same bits.
KV_HD bool sign_bit(float a) {
#if defined(__CUDA_ARCH__)
  return signbit(a);
#else
  return std::signbit(a);
#endif
}
KV_HD float f_min(float a, float b) { return (b < a || (b == a && sign_bit(b))) ? b : a; }
KV_HD float f_max(float a, float b) { return (b > a || (b == a && !sign_bit(b))) ? b : a; }
KV_HD float f_abs(float a) { return a < 0.0f ? -a : a; }
KV_HD float f_clamp(float a, float lo, float hi) { return f_min(f_max(a, lo), hi); }

}  // namespace kvlab
