#pragma once
#include <cstdint>

#include <cuda_runtime.h>

namespace kvlab::gpu {
// Fill n elements (fp16 bits or fp32) of a (..., D) tensor with deterministic pseudo-random data.
// Device fp16 conversions vs the integer reference: returns mismatches, *checked = values
// compared (65536 halves and 2^32 floats, NaNs excluded).
int64_t half_conversion_mismatches(int64_t* checked);
// fastq.cuh's quotient vs __fdiv_rn: every fp32 scale significand in [1, 2) (or every
// scale_step-th, in groups) x per_scale hashed numerator significands (0: all 2^23), plus random
// edge cases over the whole fast range with the complete code step. Returns mismatches.
int64_t fastdiv_mismatches(uint32_t per_scale, uint32_t scale_step, int64_t* checked);
// HMNMX2 over all non-NaN half pairs, FMNMX over signed zeros and random pairs, vs f_min/f_max.
int64_t minmax_mismatches(int64_t* checked);
void fill_random(void* x, int64_t n, int64_t D, bool half, uint64_t seed, cudaStream_t s);
// n / 4 hashed 32-bit words (n a multiple of 4): uniformly random bytes (codebook codes).
void fill_random_bytes(void* x, int64_t n, uint64_t seed);
}  // namespace kvlab::gpu
