// Device-side data generation for the benchmark (hash-based, never zeros).
#include "tile.cuh"
#include "util.h"

namespace kvlab::gpu {
namespace {

__device__ __forceinline__ uint32_t mix(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ull;
  x ^= x >> 33;
  return (uint32_t)x;
}

__global__ void fill_kernel(void* x, int64_t n, int64_t D, int half, uint64_t seed) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
    const uint32_t h = mix(i * 0x9e3779b97f4a7c15ull + seed);
    // Roughly Gaussian (sum of uniforms); a few channels 8x larger, as keys have.
    const float u = ((h & 0x3ff) + ((h >> 10) & 0x3ff) + ((h >> 20) & 0x3ff)) / 1024.0f - 1.5f;
    const float v = ((i % D) % 16 == 3) ? 8.0f * u : u;
    if (half) static_cast<uint16_t*>(x)[i] = float_to_half(v);
    else static_cast<float*>(x)[i] = v;
  }
}

}  // namespace

void fill_random(void* x, int64_t n, int64_t D, bool half, uint64_t seed, cudaStream_t s) {
  fill_kernel<<<132 * 16, 256, 0, s>>>(x, n, D, half ? 1 : 0, seed);
  check_launch("fill_kernel");
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
    nbad += float_to_half(fv) != float_to_half_soft(fv);
    ++nchk;
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
  half_cvt_check<<<132 * 8, 256>>>(d, d + 1);
  check_launch("half_cvt_check");
  const cudaError_t e = cudaMemcpy(h, d, sizeof(h), cudaMemcpyDeviceToHost);
  cudaFree(d);
  if (e != cudaSuccess) throw std::runtime_error(std::string("kvlab-gpu: half_cvt_check: ") + cudaGetErrorString(e));
  *checked = (int64_t)h[1];
  return (int64_t)h[0];
}

}  // namespace kvlab::gpu
