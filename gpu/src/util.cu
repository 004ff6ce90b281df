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
