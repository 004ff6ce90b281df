#pragma once
#include <cstdint>

#include <cuda_runtime.h>

namespace kvlab::gpu {
// Fill n elements (fp16 bits or fp32) of a (..., D) tensor with deterministic pseudo-random data.
void fill_random(void* x, int64_t n, int64_t D, bool half, uint64_t seed, cudaStream_t s);
}  // namespace kvlab::gpu
