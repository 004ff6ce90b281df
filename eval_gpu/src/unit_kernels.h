// The row kernels of the CUDA attention unit (attention_gpu.cpp runs the GEMMs through cuBLAS).
// Plain C++17 and CUDA types only: the .cu file sees nothing of eval's C++20 headers.
//
// Matrices are fp64. A chunk of `rows` stacked query rows (row i * heads + h: position i of
// head h) sees keys 0..nk-1; row r's logits (or values derived from them) are contiguous at
// X + r * ld, and only its first vis[r] = pos + 1 entries are valid (causal).
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

namespace kvlab::gpu_eval {

constexpr int kTop = 8;  // as kvlab::kTopK (metrics.h)

// dst[i] = (double)src[i].
void to_f64(const float* src, double* dst, int64_t n, cudaStream_t s);

// dst (n * heads, D) stacked rows = q (heads, N, D) rows first..first+n-1 of every head.
void stack_queries(const float* q, int64_t heads, int64_t N, int64_t first, int64_t n, int64_t D, double* dst,
                   cudaStream_t s);

// Reference softmax of each row of logits S: P = exp(S - M - log Z) (0 past vis[r], up to nk),
// the row's max M and log Z, and its top-k key indices (-1 past vis).
void reference_rows(const double* S, double* P, int64_t ld, int64_t nk, const int32_t* vis, int64_t rows,
                    double* m, double* logz, int32_t* top, cudaStream_t s);

// One method against the reference: H holds delta = q . (k - k_hat) on entry and P_hat on return.
// out[r * 3 + {0, 1, 2}] = sum (P - P_hat)^2, KL(P || P_hat), |top(P) & top(P_hat)| / min(k, vis).
void method_rows(const double* S, double* H, int64_t ld, int64_t nk, const int32_t* vis, int64_t rows,
                 const double* m, const double* logz, const int32_t* top, double* out, cudaStream_t s);

// out[r] = ||O_r||^2, or ||O_r - Oh_r||^2 when Oh is given; O, Oh (rows, D).
void output_rows(const double* O, const double* Oh, int64_t rows, int64_t D, double* out, cudaStream_t s);

}  // namespace kvlab::gpu_eval
