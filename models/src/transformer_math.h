// The dense arithmetic of the decoder: matrix products (Eigen, split in fixed blocks over
// threads), RMSNorm and RoPE on rows of a block of positions.
#pragma once
#include <cstdint>

#include "kvlab/dump.h"

namespace kvlab::detail {

// y (n, out) = x (n, in) @ w (out, in)^T (+ bias when not null). Output columns are split in
// fixed blocks, so the bits do not depend on the thread count.
void matmul_nt(float* y, const float* x, const float* w, const float* bias, int64_t n, int64_t in,
               int64_t out);

// Each of n rows of width `dim`: out = weight * x / sqrt(mean(x^2) + eps). out may be x.
void rmsnorm_rows(float* out, const float* x, const float* weight, int64_t n, int64_t dim, float eps);

// Rotates each head_dim slice of `row` (heads * head_dim) by the angles whose cos/sin are given
// (head_dim / 2 each): pairs (2i, 2i + 1) for adjacent, (i, i + head_dim / 2) for halves.
void rope_row(float* row, int64_t heads, int64_t head_dim, RopeStyle style, const float* cos,
              const float* sin);

}  // namespace kvlab::detail
