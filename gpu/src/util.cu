// Device-side data generation for the benchmark (hash-based, never zeros).
#include "fastq.cuh"
#include "kvlab/hash.h"
#include "util.h"

namespace kvlab::gpu {
namespace {

// The low 32 bits of MurmurHash3's finalizer (kvlab/hash.h, as validate.cpp's host data).
__device__ __forceinline__ uint32_t hash32(uint64_t x) { return (uint32_t)murmur3_fmix64(x); }

__global__ void fill_kernel(void* x, int64_t n, int64_t D, int half, uint64_t seed) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x) {
    const uint32_t h = hash32(i * kGoldenGamma + seed);
    // Roughly Gaussian (sum of uniforms); a few channels 8x larger, as keys have.
    const float u = ((h & 0x3ff) + ((h >> 10) & 0x3ff) + ((h >> 20) & 0x3ff)) / 1024.0f - 1.5f;
    const float v = ((i % D) % 16 == 3) ? 8.0f * u : u;
    if (half)
      static_cast<uint16_t*>(x)[i] = float_to_half(v);
    else
      static_cast<float*>(x)[i] = v;
  }
}

__global__ void fill_bytes_kernel(uint32_t* x, int64_t words, uint64_t seed) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < words;
       i += (int64_t)gridDim.x * blockDim.x)
    x[i] = hash32(i * kGoldenGamma + seed);
}

}  // namespace

void fill_random(void* x, int64_t n, int64_t D, bool half, uint64_t seed, cudaStream_t s) {
  fill_kernel<<<sm_count() * 16, 256, 0, s>>>(x, n, D, half ? 1 : 0, seed);
  check_launch("fill_kernel");
}

void fill_random_bytes(void* x, int64_t n, uint64_t seed) {
  fill_bytes_kernel<<<sm_count() * 16, 256>>>(static_cast<uint32_t*>(x), n / 4, seed);
  check_launch("fill_bytes_kernel");
}

}  // namespace kvlab::gpu

// ---- Exhaustive proof that the device fp16 conversions (hardware cvt, half.h) equal the
// integer reference (half_to_float_soft / float_to_half_soft), run on the device itself.
namespace kvlab::gpu {
namespace {

__global__ void half_cvt_check(unsigned long long* bad, unsigned long long* checked) {
  unsigned long long nbad = 0, nchk = 0;
  const uint64_t stride = (uint64_t)gridDim.x * blockDim.x;
  const uint64_t tid = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x;
  // all 65536 halves except NaNs (exp 31, mantissa != 0)
  for (uint64_t i = tid; i < 65536u; i += stride) {
    const uint16_t h = (uint16_t)i;
    if ((h & 0x7c00u) == 0x7c00u && (h & 0x3ffu)) continue;
    nbad += float_bits(half_to_float(h)) != float_bits(half_to_float_soft(h));
    ++nchk;
  }
  // all 2^32 float bit patterns except NaNs
  for (uint64_t i = tid; i < (1ull << 32); i += stride) {
    const uint32_t u = (uint32_t)i;
    if ((u & 0x7fffffffu) > 0x7f800000u) continue;
    const float fv = bits_float(u);
    const uint16_t soft = float_to_half_soft(fv);
    nbad += float_to_half(fv) != soft;
    const uint32_t pair = half2_bits(fv, -fv);  // F2FP (fastq.cuh's fp16 output), both halves
    nbad += (uint16_t)(pair & 0xffffu) != soft;
    nbad += (uint16_t)(pair >> 16) != float_to_half_soft(-fv);
    nchk += 3;
  }
  atomicAdd(bad, nbad);
  atomicAdd(checked, nchk);
}

}  // namespace

int64_t half_conversion_mismatches(int64_t* checked) {
  unsigned long long* d = nullptr;
  unsigned long long h[2] = {0, 0};
  if (cudaMalloc(&d, sizeof(h)) != cudaSuccess) throw std::runtime_error("kvlab-gpu: cudaMalloc failed");
  cudaMemset(d, 0, sizeof(h));
  half_cvt_check<<<sm_count() * 8, 256>>>(d, d + 1);
  check_launch("half_cvt_check");
  const cudaError_t e = cudaMemcpy(h, d, sizeof(h), cudaMemcpyDeviceToHost);
  cudaFree(d);
  if (e != cudaSuccess)
    throw std::runtime_error(std::string("kvlab-gpu: half_cvt_check: ") + cudaGetErrorString(e));
  *checked = (int64_t)h[1];
  return (int64_t)h[0];
}

}  // namespace kvlab::gpu

// ---- Proofs for fastq.cuh, run on the device itself (kvlab-gpu validate rows fastdiv, minmax).
namespace kvlab::gpu {
namespace {

// hash32: above (kvlab/hash.h's murmur3_fmix64, low 32 bits).

// fast_quot(a, s, RN(1/s)) against __fdiv_rn(a, s) for significands a, s in [1, 2): scale
// index from the block, numerators: all 2^23 (per_scale == 0) or per_scale hashed ones.
__global__ void fastdiv_sweep(uint32_t s_begin, uint32_t s_count, uint32_t s_stride, uint32_t per_scale,
                              unsigned long long* bad, unsigned long long* checked) {
  unsigned long long nbad = 0, nchk = 0;
  for (uint32_t si = blockIdx.x; si < s_count; si += gridDim.x) {
    const uint32_t sm = s_begin + si * s_stride;
    const float s = __uint_as_float(0x3f800000u | sm);
    const float r = __frcp_rn(s);
    if (per_scale == 0) {
      for (uint32_t i = threadIdx.x; i < (1u << 23); i += blockDim.x) {
        const float a = __uint_as_float(0x3f800000u | i);
        nbad += __float_as_uint(fast_quot(a, s, r)) != __float_as_uint(__fdiv_rn(a, s));
        ++nchk;
      }
    } else {
      for (uint32_t i = threadIdx.x; i < per_scale; i += blockDim.x) {
        // the 32 smallest and 32 largest significands, then hashed ones
        const uint32_t am =
            i < 64 ? (i < 32 ? i : 0x7fffffu - (i - 32)) : hash32(((uint64_t)sm << 32) | i) & 0x7fffffu;
        const float a = __uint_as_float(0x3f800000u | am);
        nbad += __float_as_uint(fast_quot(a, s, r)) != __float_as_uint(__fdiv_rn(a, s));
        ++nchk;
      }
    }
  }
  atomicAdd(bad, nbad);
  atomicAdd(checked, nchk);
}

// Random (a, s) over the whole fast range, and the complete code step (fastq.cuh's biased codes
// vs KvlabRecipe::asym_code / sym_code): s = m * 2^e, e in [-100, 99] plus the range ends;
// |a/s| spread over [2^-40, 2^31) plus zeros, subnormal a and exact half-integer quotients.
// Quotients with |a/s| >= 1/4 must match bit for bit (case B), codes always (case A too).
__global__ void fastdiv_edges(uint64_t n, uint64_t seed, unsigned long long* bad,
                              unsigned long long* checked) {
  unsigned long long nbad = 0, nchk = 0;
  const uint64_t stride = (uint64_t)gridDim.x * blockDim.x;
  for (uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
    const uint32_t h0 = hash32(seed + 4 * i), h1 = hash32(seed + 4 * i + 1), h2 = hash32(seed + 4 * i + 2),
                   h3 = hash32(seed + 4 * i + 3);
    float s;
    switch (h0 & 7) {
      case 0: s = kFastScaleMin; break;
      case 1: s = kFastScaleMax; break;
      case 2: s = __uint_as_float(__float_as_uint(kFastScaleMin) + (h1 & 0xff)); break;
      case 3: s = __uint_as_float(__float_as_uint(kFastScaleMax) - (h1 & 0xff)); break;
      default:
        s = __uint_as_float(((uint32_t)(27 + (h1 % 200)) << 23) | (h2 & 0x7fffffu));
        break;  // 2^-100 .. 2^99
    }
    const int e = (int)(h3 % 72) - 40;  // quotient magnitude 2^-40 .. 2^31
    float a;
    switch ((h0 >> 3) & 7) {
      case 0: a = 0.0f; break;
      case 1: a = __uint_as_float(h2 & 0x007fffffu); break;                    // subnormal
      case 2: a = __fmul_rn((float)((int)(h2 % 512) - 256) + 0.5f, s); break;  // near half-integer quotients
      case 3: a = __fmul_rn(__uint_as_float(0x3f800000u | (h2 & 0x7fffffu)), s); break;
      default: a = __fmul_rn(s, ldexpf(__uint_as_float(0x3f800000u | (h2 & 0x7fffffu)), e)); break;
    }
    if ((h0 >> 6) & 1) a = -a;
    if (!isfinite(a) || fabsf(a) >= ldexpf(s, 31)) continue;
    const float r = __frcp_rn(s), ref = __fdiv_rn(a, s);
    if (fabsf(ref) >= 0.25f) nbad += __float_as_uint(fast_quot(a, s, r)) != __float_as_uint(ref);
    // Code step, through x - zero with a random zero (x = RN(zero + a); a is then re-derived).
    const float zero = ((h0 >> 7) & 1) ? 0.0f : __fmul_rn((float)((int)(h1 % 64) - 32), s);
    const float x = __fadd_rn(zero, a);
    const GroupParams gp{s, zero};
    const QP qp = make_qp(gp, 1);
    const float a2 = __fsub_rn(x, zero);
    if (isfinite(x) && fabsf(a2) < ldexpf(s, 31)) {
      nbad += (biased_code<false, 2>(x, qp) - kMagicAsym) != KvlabRecipe::asym_code(x, gp, 3);
      nbad += (biased_code<false, 4>(x, qp) - kMagicAsym) != KvlabRecipe::asym_code(x, gp, 15);
      nbad += (biased_code<false, 8>(x, qp) - kMagicAsym) != KvlabRecipe::asym_code(x, gp, 255);
      nbad += (biased_code_levels(x, qp, 63.0f) - kMagicAsym) != KvlabRecipe::asym_code(x, gp, 63);
      nchk += 4;
    }
    const GroupParams sp{s, 0.0f};
    const QP sq = make_qp(sp, 1);
    nbad += (biased_code<true, 2>(a, sq) & 3u) != KvlabRecipe::sym_code(a, sp, 1, 2);
    nbad += (biased_code<true, 4>(a, sq) & 15u) != KvlabRecipe::sym_code(a, sp, 7, 4);
    nbad += (biased_code<true, 8>(a, sq) & 255u) != KvlabRecipe::sym_code(a, sp, 127, 8);
    nchk += 4;
  }
  atomicAdd(bad, nbad);
  atomicAdd(checked, nchk);
}

// HMNMX2 on every pair of non-NaN halves, and FMNMX on signed zeros and random float pairs,
// against hd.h's total-order f_min / f_max (bit patterns).
__global__ void minmax_check(uint64_t n_random, uint64_t seed, unsigned long long* bad,
                             unsigned long long* checked) {
  unsigned long long nbad = 0, nchk = 0;
  const uint64_t stride = (uint64_t)gridDim.x * blockDim.x;
  const uint64_t tid = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x;
  for (uint64_t i = tid; i < (1ull << 32); i += stride) {
    const uint16_t ha = (uint16_t)(i >> 16), hb = (uint16_t)i;
    if (((ha & 0x7c00u) == 0x7c00u && (ha & 0x3ffu)) || ((hb & 0x7c00u) == 0x7c00u && (hb & 0x3ffu)))
      continue;
    const uint32_t pa = ha | ((uint32_t)hb << 16), pb = hb | ((uint32_t)ha << 16);
    const __half2 m = __hmin2(*reinterpret_cast<const __half2*>(&pa), *reinterpret_cast<const __half2*>(&pb));
    const __half2 M = __hmax2(*reinterpret_cast<const __half2*>(&pa), *reinterpret_cast<const __half2*>(&pb));
    const uint32_t mu = *reinterpret_cast<const uint32_t*>(&m), Mu = *reinterpret_cast<const uint32_t*>(&M);
    const float fa = half_to_float_soft(ha), fb = half_to_float_soft(hb);
    // lane 0 computes (a, b), lane 1 (b, a): both operand orders
    nbad += float_bits(half_to_float_soft((uint16_t)(mu & 0xffffu))) != float_bits(f_min(fa, fb));
    nbad += float_bits(half_to_float_soft((uint16_t)(mu >> 16))) != float_bits(f_min(fb, fa));
    nbad += float_bits(half_to_float_soft((uint16_t)(Mu & 0xffffu))) != float_bits(f_max(fa, fb));
    nbad += float_bits(half_to_float_soft((uint16_t)(Mu >> 16))) != float_bits(f_max(fb, fa));
    nchk += 4;
  }
  for (uint64_t i = tid; i < n_random; i += stride) {
    float a, b;
    if (i < 4) {
      a = (i & 1) ? -0.0f : 0.0f;
      b = (i & 2) ? -0.0f : 0.0f;
    } else {
      const uint32_t u = hash32(seed + 2 * i), v = hash32(seed + 2 * i + 1);
      a = __uint_as_float(u);
      b = (v & 3) == 0 ? -a : (v & 3) == 1 ? a : __uint_as_float(v);
      if (!(a == a) || !(b == b)) continue;
    }
    nbad += float_bits(min_hw(a, b)) != float_bits(f_min(a, b));
    nbad += float_bits(max_hw(a, b)) != float_bits(f_max(a, b));
    nchk += 2;
  }
  atomicAdd(bad, nbad);
  atomicAdd(checked, nchk);
}

template <class F>
int64_t run_check(int64_t* checked, F&& launch, const char* what) {
  unsigned long long* d = nullptr;
  unsigned long long h[2] = {0, 0};
  if (cudaMalloc(&d, sizeof(h)) != cudaSuccess) throw std::runtime_error("kvlab-gpu: cudaMalloc failed");
  cudaMemset(d, 0, sizeof(h));
  launch(d, d + 1);
  check_launch(what);
  const cudaError_t e = cudaMemcpy(h, d, sizeof(h), cudaMemcpyDeviceToHost);
  cudaFree(d);
  if (e != cudaSuccess)
    throw std::runtime_error(std::string("kvlab-gpu: ") + what + ": " + cudaGetErrorString(e));
  *checked = (int64_t)h[1];
  return (int64_t)h[0];
}

}  // namespace

int64_t fastdiv_mismatches(uint32_t per_scale, uint32_t scale_step, int64_t* checked) {
  int64_t total_bad = 0, total_chk = 0;
  const uint32_t step = scale_step < 1 ? 1 : scale_step, n_scales = (1u << 23) / step;
  // A full sweep (per_scale 0) is 2^46 divisions: launches of 2^13 scales (~2^36 each) keep
  // every launch short.
  const uint32_t slice = per_scale == 0 ? (1u << 13) : n_scales;
  for (uint32_t s0 = 0; s0 < n_scales; s0 += slice) {
    int64_t chk = 0;
    total_bad += run_check(
        &chk,
        [&](unsigned long long* b, unsigned long long* c) {
          fastdiv_sweep<<<sm_count() * 16, 256>>>(s0 * step, std::min(slice, n_scales - s0), step, per_scale,
                                                  b, c);
        },
        "fastdiv_sweep");
    total_chk += chk;
  }
  int64_t chk = 0;
  total_bad += run_check(
      &chk,
      [&](unsigned long long* b, unsigned long long* c) {
        fastdiv_edges<<<sm_count() * 8, 256>>>(per_scale == 0 ? (1ull << 30) : (uint64_t)per_scale << 10, 77,
                                               b, c);
      },
      "fastdiv_edges");
  *checked = total_chk + chk;
  return total_bad;
}

int64_t minmax_mismatches(int64_t* checked) {
  return run_check(
      checked,
      [&](unsigned long long* b, unsigned long long* c) {
        minmax_check<<<sm_count() * 8, 256>>>(1ull << 28, 5, b, c);
      },
      "minmax_check");
}

}  // namespace kvlab::gpu
