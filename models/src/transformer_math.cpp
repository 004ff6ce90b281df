// Matrix products through Eigen's GEMM (FMA where the CPU has it), RMSNorm and RoPE.
#include "transformer_math.h"

#include <Eigen/Core>
#include <algorithm>
#include <cmath>

#include "kvlab/transformer.h"

namespace kvlab {
namespace detail {

using RowMajor = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using ConstMap = Eigen::Map<const RowMajor>;
using StridedMap = Eigen::Map<RowMajor, 0, Eigen::OuterStride<>>;

void matmul_nt(float* y, const float* x, const float* w, const float* bias, int64_t n, int64_t in,
               int64_t out) {
  constexpr int64_t kBlock = 128;  // output columns per task; fixed, so threads change no bits
  const int64_t blocks = (out + kBlock - 1) / kBlock;
  const ConstMap X(x, n, in);
#pragma omp parallel for schedule(dynamic) if (n * in * out >= (1L << 18))
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t c0 = b * kBlock, cols = std::min(kBlock, out - c0);
    StridedMap Y(y + c0, n, cols, Eigen::OuterStride<>(out));
    Y.noalias() = X * ConstMap(w + c0 * in, cols, in).transpose();
    if (bias)
      for (int64_t i = 0; i < n; ++i)
        for (int64_t j = 0; j < cols; ++j) Y(i, j) += bias[c0 + j];
  }
}

void rmsnorm_rows(float* out, const float* x, const float* weight, int64_t n, int64_t dim, float eps) {
  for (int64_t r = 0; r < n; ++r) {
    const float* xr = x + r * dim;
    float* o = out + r * dim;
    float ss = 0.0f;
    for (int64_t j = 0; j < dim; ++j) ss += xr[j] * xr[j];
    ss = 1.0f / std::sqrt(ss / (float)dim + eps);
    for (int64_t j = 0; j < dim; ++j) o[j] = weight[j] * (ss * xr[j]);
  }
}

void rope_row(float* row, int64_t heads, int64_t head_dim, RopeStyle style, const float* cos,
              const float* sin) {
  const int64_t half = head_dim / 2;
  // adjacent: partner of pair i is (2i, 2i + 1); halves (rotate_half): (i, i + D/2).
  const int64_t stride = style == RopeStyle::Halves ? 1 : 2, gap = style == RopeStyle::Halves ? half : 1;
  for (int64_t h = 0; h < heads; ++h) {
    float* v = row + h * head_dim;
    for (int64_t i = 0; i < half; ++i) {
      float* a = v + i * stride;
      float* b = a + gap;
      const float x0 = *a, x1 = *b;
      *a = x0 * cos[i] - x1 * sin[i];
      *b = x0 * sin[i] + x1 * cos[i];
    }
  }
}

}  // namespace detail

void rope_cos_sin(float theta, int64_t head_dim, int64_t pos, float* cos_out, float* sin_out) {
  for (int64_t i = 0; i < head_dim / 2; ++i) {
    // run.c and transformers' default RoPE alike: 1 / theta^(2i / D) and pos * freq in fp32.
    const float freq = 1.0f / std::pow(theta, (float)(2 * i) / (float)head_dim);
    const float angle = (float)pos * freq;
    cos_out[i] = std::cos(angle);
    sin_out[i] = std::sin(angle);
  }
}

}  // namespace kvlab
