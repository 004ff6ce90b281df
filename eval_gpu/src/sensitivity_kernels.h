// The kernels of the CUDA sensitivity unit (sensitivity_gpu.cpp runs the logit GEMMs through
// cuBLAS). Plain C++17 and CUDA types only. Matrices are fp64, rows contiguous: row r of a tile
// at X + r * ld.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

namespace kvlab::gpu_eval {

// dst[i] = (double)src[i] * scale (the CPU's scaled_queries).
void scale_to_f64(const float* src, double* dst, int64_t n, double scale, cudaStream_t s);

// In place, per row: the logits' softmax over the first vis[r] entries (the CPU's order of
// operations: exp(l - max), then times 1 / sum), zeros from vis[r] up to width; s0[r] = sum P^2.
void softmax_rows(double* S, int64_t ld, int64_t width, const int32_t* vis, int64_t rows, double* s0,
                  cudaStream_t s);

// Per row r and channel c, over the n quantized keys (P row r at P + r * ld, from the first of
// them): A = sum P em, B = sum P^2 em, C = sum P^2 em^2 with em = expm1(a delta[c][j]), a =
// qs[r][c], expm1 by the CPU's polynomial for this (row, channel)'s largest |a delta|
// (sensitivity_kernel.cpp). abc[(r * D + c) * 3 + {0, 1, 2}]; keys summed in order per thread.
void channel_sums(const double* P, int64_t ld, const double* qs, const double* delta, const double* absmax,
                  int64_t rows, int64_t D, int64_t n, double* abc, cudaStream_t s);

}  // namespace kvlab::gpu_eval
