// Tensor-core pieces of the streaming kernel's packed tiles (attn_stream.cuh, docs/FORMATS.md
// section 9.2): codes become fp16 operands with no arithmetic (a b-bit code c in the low bits of
// an fp16 is the subnormal c * 2^-24, exact; an int8 code takes one f16x2 subtraction), and the fp32 factor
// they multiply (q * key scale, p * value scale) is scaled by a power of two and split into two fp16 values,
// hi + lo, which carry it to 2^-22 relative (section 9.3). One m16n8k16 MMA then takes 16 tokens (or
// channels) x 16 channels (or tokens) for the 4 query heads, hi in columns 0-3 and lo in columns 4-7.
#pragma once
#include <cuda_fp16.h>

#include <cstdint>

namespace kvlab::gpu::attn {

// D (16x8, fp32) += A (16x16, fp16, row) B (16x8, fp16, col); fragments as the PTX ISA draws them:
// lane = 4 gid + tig; a0 = A[gid][2tig..+1], a1 = A[gid+8][2tig..], a2 = A[gid][2tig+8..],
// a3 = A[gid+8][2tig+8..]; b0 = B[2tig..+1][gid], b1 = B[2tig+8..][gid]; d0,d1 = D[gid][2tig..],
// d2,d3 = D[gid+8][2tig..] (low half of a register = the lower k index).
__device__ __forceinline__ void mma16816(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                         uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// Byte i of x in byte 0 and byte i of y in byte 2 (bytes 1 and 3: don't care).
__device__ __forceinline__ uint32_t pair_bytes(uint32_t x, uint32_t y, uint32_t i) {
  uint32_t r;
  asm("prmt.b32 %0, %1, %2, %3;\n" : "=r"(r) : "r"(x), "r"(y), "r"(i | ((i + 4) << 8)));
  return r;
}

// The two KB-bit codes at bit `shift` of bytes 0 and 2 of x, left in place: an fp16 pair of the
// subnormals code * 2^(shift - 24), by one LOP3 (shifting them down first took a second
// instruction). Every operand of an MMA output row carries the same 2^shift, so the row's sum is
// exactly 2^shift times the unshifted one; the kernel scales it back by 2^-shift (exact).
template <int KB>
__device__ __forceinline__ uint32_t code_pair(uint32_t x, int shift) {
  return x & ((((1u << KB) - 1u) * 0x00010001u) << shift);
}

// E with max|x| * 2^E in [2^14, 2^15) (keep when max is 0: nothing to carry).
__device__ __forceinline__ int split_exponent(float mx, int keep) {
  int e = 0;
  if (!(mx > 0.0f)) return keep;
  frexpf(mx, &e);
  return 15 - e;
}

// x * 2^e rounded once: one multiply where 2^e is a normal float (ldexpf takes ~17 instructions;
// the same value wherever the product is a normal float, as it is for every operand kept here).
__device__ __forceinline__ float mul_pow2(float x, int e) {
  return (unsigned)(e + 126) <= 253u ? __fmul_rn(x, __int_as_float((e + 127) << 23)) : ldexpf(x, e);
}

// x * 2^E as hi (lo == false) or lo: hi = fp16(y), lo = fp16(y - hi).
__device__ __forceinline__ uint16_t split_half(float x, int E, bool lo) {
  const float y = mul_pow2(x, E);
  const __half h = __float2half_rn(y);
  return __half_as_ushort(lo ? __float2half_rn(__fsub_rn(y, __half2float(h))) : h);
}

// The int8 codes in bytes 0 and 2 of x as an fp16 pair of their values, exactly: the bits
// 0x6400 | (code ^ 0x80) are the fp16 1024 + code + 128, and one f16x2 subtraction of 1152 leaves
// the code (an integer of magnitude <= 128, exact in fp16).
__device__ __forceinline__ uint32_t int8_pair(uint32_t x) {
  const uint32_t m = (x & 0x00FF00FFu) ^ 0x64806480u;
  uint32_t r;
  asm("sub.f16x2 %0, %1, %2;\n" : "=r"(r) : "r"(m), "r"(0x64806480u));
  return r;
}

__device__ __forceinline__ uint32_t pack2(uint16_t lo_k, uint16_t hi_k) {
  return lo_k | ((uint32_t)hi_k << 16);
}

}  // namespace kvlab::gpu::attn
