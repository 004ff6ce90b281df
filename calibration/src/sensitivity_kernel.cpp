// Fast (rank-1) and naive (full recomputation) sensitivity of one query tile; see the header.
#include "sensitivity_kernel.h"

#include <Eigen/Dense>
#include <algorithm>
#include <cmath>
#include <vector>

namespace kvlab::detail {
namespace {

using MatrixD = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using ConstMapD = Eigen::Map<const MatrixD>;

// Query rows of the tile in double, scaled by 1/sqrt(D).
MatrixD scaled_queries(const HeadTask& t) {
  MatrixD qs(t.count, t.D);
  const double s = 1.0 / std::sqrt((double)t.D);
  for (int64_t i = 0; i < t.count; ++i)
    for (int64_t c = 0; c < t.D; ++c) qs(i, c) = (double)t.q[t.positions[i] * t.D + c] * s;
  return qs;
}

// Softmax of logits[0..len) into p (causal row of one query).
void softmax(const double* logits, int64_t len, double* p) {
  double m = -INFINITY;
  for (int64_t j = 0; j < len; ++j) m = std::max(m, logits[j]);
  double z = 0;
  for (int64_t j = 0; j < len; ++j) z += (p[j] = std::exp(logits[j] - m));
  const double inv = 1.0 / z;
  for (int64_t j = 0; j < len; ++j) p[j] *= inv;
}

// expm1 for |d| <= 0.5: Taylor to degree 10 (truncation < 1.2e-11 relative), branch-free so
// the loop vectorizes.
inline double expm1_small(double d) {
  double p = 1.0 / 3628800.0;
  p = p * d + 1.0 / 362880.0;
  p = p * d + 1.0 / 40320.0;
  p = p * d + 1.0 / 5040.0;
  p = p * d + 1.0 / 720.0;
  p = p * d + 1.0 / 120.0;
  p = p * d + 1.0 / 24.0;
  p = p * d + 1.0 / 6.0;
  p = p * d + 0.5;
  p = p * d + 1.0;
  return p * d;
}

}  // namespace

void tile_sensitivity_fast(const HeadTask& t, double* sq_err) {
  if (t.count == 0) return;
  const int64_t len_max = t.positions[t.count - 1] + 1;
  const MatrixD qs = scaled_queries(t);
  const MatrixD logits = qs * ConstMapD(t.k, len_max, t.D).transpose();  // (count, len_max)
  std::vector<double> p(len_max), p2(len_max);
  for (int64_t i = 0; i < t.count; ++i) {
    const int64_t len = t.positions[i] + 1;
    softmax(logits.row(i).data(), len, p.data());
    double s0 = 0;
    for (int64_t j = 0; j < len; ++j) s0 += (p2[j] = p[j] * p[j]);
    const int64_t jn = std::clamp<int64_t>(len - t.kb, 0, t.n);  // quantized keys this query sees
    if (jn == 0) continue;
    const double* P = p.data() + t.kb;
    const double* P2 = p2.data() + t.kb;
    for (int64_t c = 0; c < t.D; ++c) {
      const double a = qs(i, c);
      const double* dl = t.delta + c * t.n;
      double A = 0, B = 0, C = 0;
      if (std::abs(a) * t.delta_absmax[c] <= 0.5) {
#pragma omp simd reduction(+ : A, B, C)
        for (int64_t j = 0; j < jn; ++j) {
          const double em = expm1_small(a * dl[j]);
          A += P[j] * em;
          B += P2[j] * em;
          C += P2[j] * em * em;
        }
      } else {
        for (int64_t j = 0; j < jn; ++j) {
          const double em = std::expm1(a * dl[j]);
          A += P[j] * em;
          B += P2[j] * em;
          C += P2[j] * em * em;
        }
      }
      const double r = 1.0 + A;
      sq_err[c] += std::max(0.0, C - 2.0 * A * B + A * A * s0) / (r * r);
    }
  }
}

void tile_sensitivity_naive(const HeadTask& t, double* sq_err) {
  if (t.count == 0) return;
  const int64_t len_max = t.positions[t.count - 1] + 1;
  const MatrixD qs = scaled_queries(t);
  const ConstMapD k(t.k, len_max, t.D);
  const MatrixD logits = qs * k.transpose();
  MatrixD khat = k;
  std::vector<double> p(len_max), ph(len_max);
  for (int64_t c = 0; c < t.D; ++c) {
    const int64_t end = std::min(t.kb + t.n, len_max);
    for (int64_t j = t.kb; j < end; ++j) khat(j, c) = k(j, c) + t.delta[c * t.n + (j - t.kb)];
    const MatrixD lhat = qs * khat.transpose();  // every logit recomputed
    for (int64_t i = 0; i < t.count; ++i) {
      const int64_t len = t.positions[i] + 1;
      softmax(logits.row(i).data(), len, p.data());
      softmax(lhat.row(i).data(), len, ph.data());
      double s = 0;
      for (int64_t j = 0; j < len; ++j) s += (p[j] - ph[j]) * (p[j] - ph[j]);
      sq_err[c] += s;
    }
    for (int64_t j = t.kb; j < end; ++j) khat(j, c) = k(j, c);
  }
}

}  // namespace kvlab::detail
