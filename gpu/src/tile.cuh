// Helpers shared by the kernel families: element loads, parameter storage, the recipe calls
// (KvlabRecipe from core/include/kvlab/recipe.h, never re-implemented here) and tile copies.
#pragma once
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "kernels.h"
#include "kvlab/half.h"
#include "kvlab/pack.h"
#include "kvlab/recipe.h"

namespace kvlab::gpu {

__device__ __forceinline__ float load_in(const uint16_t* x, int64_t i) { return half_to_float(x[i]); }
__device__ __forceinline__ float load_in(const float* x, int64_t i) { return x[i]; }

// Four consecutive elements starting at i (i % 4 == 0, base 16-byte aligned).
__device__ __forceinline__ void load4(const uint16_t* x, int64_t i, float v[4]) {
  const uint2 r = *reinterpret_cast<const uint2*>(x + i);
  v[0] = half_to_float((uint16_t)(r.x & 0xffffu));
  v[1] = half_to_float((uint16_t)(r.x >> 16));
  v[2] = half_to_float((uint16_t)(r.y & 0xffffu));
  v[3] = half_to_float((uint16_t)(r.y >> 16));
}
__device__ __forceinline__ void load4(const float* x, int64_t i, float v[4]) {
  const float4 r = *reinterpret_cast<const float4*>(x + i);
  v[0] = r.x;
  v[1] = r.y;
  v[2] = r.z;
  v[3] = r.w;
}

// Element j of a 16-byte input row holding 8 fp16 (two per word) or 4 fp32 values.
template <class In>
__device__ __forceinline__ float row_value(const uint4& r, int j) {
  const uint32_t uw[4] = {r.x, r.y, r.z, r.w};
  return sizeof(In) == 2 ? half_to_float((uint16_t)(uw[j / 2] >> (16 * (j & 1)))) : __uint_as_float(uw[j]);
}

__device__ __forceinline__ void store_param(void* p, int64_t i, float v, int half) {
  if (half)
    static_cast<uint16_t*>(p)[i] = float_to_half(v);  // exact: v is fp16-representable
  else
    static_cast<float*>(p)[i] = v;
}
__device__ __forceinline__ float load_param(const void* p, int64_t i, int half) {
  if (half) return half_to_float(__ldg(static_cast<const uint16_t*>(p) + i));
  return __ldg(static_cast<const float*>(p) + i);
}

// The same choices as core/src/quantize.cpp's params_of / code_of for the kvlab profile.
__device__ __forceinline__ GroupParams params_of(float mn, float mx, int bits, int sym, int half) {
  if (sym) return KvlabRecipe::sym_params(f_max(f_abs(mn), f_abs(mx)), sym_qmax(bits), half != 0);
  return KvlabRecipe::asym_params(mn, mx, asym_levels(bits), half != 0);
}
__device__ __forceinline__ uint32_t code_of(float v, GroupParams p, int bits, int sym) {
  if (sym) return KvlabRecipe::sym_code(v, p, sym_qmax(bits), bits);
  return KvlabRecipe::asym_code(v, p, asym_levels(bits));
}
__device__ __forceinline__ float dequant_of(uint32_t code, GroupParams p, int width, int sym) {
  return sym ? KvlabRecipe::sym_dequant(code, p, width) : KvlabRecipe::asym_dequant(code, p);
}
__device__ __forceinline__ bool params_fit(GroupParams p) { return isfinite(p.scale) && isfinite(p.zero); }

// Record group params: storage, plus the overflow flag the host turns into an exception.
__device__ __forceinline__ void write_params(const DevQuant& q, int64_t i, GroupParams p, int sym, int half) {
  if (!params_fit(p)) atomicOr(q.overflow, 1);
  store_param(q.scale, i, p.scale, half);
  if (!sym) store_param(q.zero, i, p.zero, half);
}

// Copy `rows` rows of `nbytes` bytes between pitched buffers, 4-byte words when everything
// is word aligned, else bytes. All threads of the block take part.
__device__ __forceinline__ void copy_rows(uint8_t* dst, int64_t dpitch, const uint8_t* src, int64_t spitch,
                                          int rows, int nbytes) {
  const bool words = ((reinterpret_cast<uintptr_t>(dst) | reinterpret_cast<uintptr_t>(src) |
                       (uintptr_t)dpitch | (uintptr_t)spitch | (uintptr_t)nbytes) &
                      3u) == 0;
  if (words) {
    const int nw = nbytes / 4, total = rows * nw;
    for (int i = threadIdx.x; i < total; i += blockDim.x) {
      const int r = i / nw, w = i - r * nw;
      reinterpret_cast<uint32_t*>(dst + r * dpitch)[w] =
          reinterpret_cast<const uint32_t*>(src + r * spitch)[w];
    }
  } else {
    const int total = rows * nbytes;
    for (int i = threadIdx.x; i < total; i += blockDim.x) {
      const int r = i / nbytes, b = i - r * nbytes;
      dst[r * dpitch + b] = src[r * spitch + b];
    }
  }
}

// Load `rows` rows of D input elements (contiguous in global memory from x) into a float
// tile with row pitch `pitch` floats. Elements are converted once, here.
template <class In>
__device__ __forceinline__ void load_tile(float* tile, int pitch, const In* x, int rows, int D) {
  const int64_t n = (int64_t)rows * D;
  const bool vec = (D % 4 == 0) && ((reinterpret_cast<uintptr_t>(x) & (4 * sizeof(In) - 1)) == 0);
  if (vec) {
    const int nv = (int)(n / 4), dv = D / 4;
    constexpr int U = 8;  // loads in flight per thread before the first use
    for (int base = threadIdx.x; base < nv; base += U * blockDim.x) {
      float v[U][4];
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const int i = base + u * blockDim.x;
        if (i < nv) load4(x, (int64_t)i * 4, v[u]);
      }
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const int i = base + u * blockDim.x;
        if (i < nv) {
          const int r = i / dv, c = (i - r * dv) * 4;
          float* d = tile + r * pitch + c;
          if (pitch % 4 == 0) {
            *reinterpret_cast<float4*>(d) = make_float4(v[u][0], v[u][1], v[u][2], v[u][3]);
          } else {
            d[0] = v[u][0];
            d[1] = v[u][1];
            d[2] = v[u][2];
            d[3] = v[u][3];
          }
        }
      }
    }
  } else {
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
      const int r = (int)(i / D), c = (int)(i - (int64_t)r * D);
      tile[r * pitch + c] = load_in(x, i);
    }
  }
}

// Store one dequantized value (or its code) to the output tensor.
__device__ __forceinline__ void store_out(void* out, int64_t i, float v, uint32_t code, OutType o) {
  if (o == OutType::F32)
    static_cast<float*>(out)[i] = v;
  else if (o == OutType::F16)
    static_cast<uint16_t*>(out)[i] = float_to_half(v);
  else
    static_cast<uint8_t*>(out)[i] = (uint8_t)code;
}

// Order keys for min/max: ord_key maps a finite float to an int32 whose signed order is the
// total order of hd.h's f_min/f_max (-0 < +0; negative values reversed by flipping their
// magnitude bits). It is an involution on the bits, so min/max of keys, mapped back, is bit
// for bit the element f_min/f_max choose (both return one of their inputs) in 4 integer
// instructions per element instead of f_min + f_max's compare/select chains.
__device__ __forceinline__ int32_t ord_key(float v) {
  const int32_t u = __float_as_int(v);
  return u ^ (int32_t)((uint32_t)(u >> 31) >> 1);
}
__device__ __forceinline__ float key_float(int32_t k) {
  return __int_as_float(k ^ (int32_t)((uint32_t)(k >> 31) >> 1));
}

// Store 4 consecutive outputs at element e (e % 4 == 0, base 16-byte aligned): one vector store.
__device__ __forceinline__ void store_out4(void* out, int64_t e, const float y[4], const uint32_t c[4],
                                           OutType o) {
  if (o == OutType::F32) {
    *reinterpret_cast<float4*>(static_cast<float*>(out) + e) = make_float4(y[0], y[1], y[2], y[3]);
  } else if (o == OutType::F16) {
    const uint32_t a = (uint32_t)float_to_half(y[0]) | ((uint32_t)float_to_half(y[1]) << 16);
    const uint32_t b = (uint32_t)float_to_half(y[2]) | ((uint32_t)float_to_half(y[3]) << 16);
    *reinterpret_cast<uint2*>(static_cast<uint16_t*>(out) + e) = make_uint2(a, b);
  } else {
    *reinterpret_cast<uint32_t*>(static_cast<uint8_t*>(out) + e) =
        c[0] | (c[1] << 8) | (c[2] << 16) | (c[3] << 24);
  }
}

// Copy n raw input elements (contiguous) into shared memory, 16-byte vectors when both ends
// allow it, U loads in flight per thread.
template <class In, int U = 4>
__device__ __forceinline__ void load_raw(In* tile, const In* x, int n) {
  const bool vec = ((reinterpret_cast<uintptr_t>(x) & 15u) == 0) && ((n * (int)sizeof(In)) % 16 == 0);
  if (vec) {
    const int nv = n * (int)sizeof(In) / 16;
    const uint4* src = reinterpret_cast<const uint4*>(x);
    uint4* dst = reinterpret_cast<uint4*>(tile);
    for (int base = threadIdx.x; base < nv; base += U * blockDim.x) {
      uint4 v[U];
#pragma unroll
      for (int u = 0; u < U; ++u)
        if (base + u * (int)blockDim.x < nv) v[u] = __ldcs(src + base + u * blockDim.x);
#pragma unroll
      for (int u = 0; u < U; ++u)
        if (base + u * (int)blockDim.x < nv) dst[base + u * blockDim.x] = v[u];
    }
  } else {
    for (int i = threadIdx.x; i < n; i += blockDim.x) tile[i] = x[i];
  }
}
__device__ __forceinline__ float to_f(uint16_t h) { return half_to_float(h); }
__device__ __forceinline__ float to_f(float v) { return v; }

// Pitch (bytes) of a staged row of nb bytes: a multiple of 4 whose word count is odd, so
// threads on consecutive rows hit different shared-memory banks.
__host__ __device__ __forceinline__ int stage_pitch(int64_t nb) { return (int)(((nb + 7) / 8) * 8 + 4); }

inline void check_launch(const char* what) {
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) {
    throw std::runtime_error(std::string("kvlab-gpu: launch of ") + what +
                             " failed: " + cudaGetErrorString(e));
  }
}

inline int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

inline int ilog2(int64_t v) {
  int l = 0;
  while ((int64_t(1) << (l + 1)) <= v) ++l;
  return l;
}

// Streaming multiprocessors of the current device, read once per device.
inline int sm_count() {
  constexpr int kMaxDevices = 64;
  static std::atomic<int> cache[kMaxDevices] = {};
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= kMaxDevices) dev = 0;
  int n = cache[dev].load(std::memory_order_relaxed);
  if (n == 0) {
    if (cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess || n < 1) n = 1;
    cache[dev].store(n, std::memory_order_relaxed);
  }
  return n;
}

// Blocks for a persistent launch: as many as fit on the device at once.
template <class K>
inline unsigned persistent_grid(K kern, int threads, int64_t work_blocks) {
  int per_sm = 0;
  cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kern, threads, 0);
  return (unsigned)std::max<int64_t>(
      1, std::min<int64_t>(work_blocks, (int64_t)std::max(per_sm, 1) * sm_count()));
}

}  // namespace kvlab::gpu
