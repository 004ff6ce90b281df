#pragma once
#include <cstdint>

#include <cuda_runtime.h>

namespace kvlab::gpu {
// Fill n elements (fp16 bits or fp32) of a (..., D) tensor with deterministic pseudo-random data.
// Device fp16 conversions vs the integer reference: returns mismatches, *checked = values
// compared (65536 halves and 2^32 floats, NaNs excluded).
int64_t half_conversion_mismatches(int64_t* checked);
void fill_random(void* x, int64_t n, int64_t D, bool half, uint64_t seed, cudaStream_t s);
}  // namespace kvlab::gpu
