// Fast (rank-1) and naive (full recomputation) sensitivity of one query tile; see the header.
#include "sensitivity_kernel.h"

#include <Eigen/Dense>
#include <algorithm>
#include <cmath>
#include <cstring>
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

// expm1 by its Taylor polynomial of degree Deg, Horner, branch-free so loops vectorize. The
// truncation error relative to expm1(d) is below |d|^Deg / (Deg + 1)!; kBound gives each degree
// the largest |d| that keeps it under 1e-11.
constexpr double inv_factorial(int k) { return k <= 1 ? 1.0 : inv_factorial(k - 1) / k; }

// sum_{k=K..Deg} x^(k-K) / k! by Horner, unrolled at compile time with constant coefficients
// (a runtime loop over inv_factorial was not folded and cost calls per element).
template <int K, int Deg>
inline double horner(double x) {
  constexpr double c = inv_factorial(K);
  if constexpr (K == Deg)
    return c;
  else
    return horner<K + 1, Deg>(x) * x + c;
}

template <int Deg>
inline double expm1_taylor(double d) {
  return horner<1, Deg>(d) * d;
}

// exp(d) for |d| <= 300, branch-free: d = n ln2 + r, |r| <= ln2/2, exp(r) by Taylor to degree 12
// (truncation < 1e-14), 2^n built in the exponent bits. The shifter rounds d log2(e) to an
// integer held in t's low mantissa bits.
inline double exp_bounded(double d) {
  constexpr double kLog2e = 1.4426950408889634, kLn2 = 0.6931471805599453, kShifter = 0x1.8p52;
  constexpr int64_t kShifterBits = 0x4338000000000000;
  const double t = d * kLog2e + kShifter;
  const double n = t - kShifter;
  const double r = d - n * kLn2;
  const double p = horner<0, 12>(r);
  int64_t bits;
  std::memcpy(&bits, &t, sizeof bits);
  bits = (bits - kShifterBits + 1023) << 52;
  double scale;
  std::memcpy(&scale, &bits, sizeof scale);
  return p * scale;
}

// expm1 for |d| <= 300: the Taylor polynomial near 0 (where exp(d) - 1 would cancel), exp - 1
// beyond 0.5 (relative error below 3 ulp there).
inline double expm1_bounded(double d) {
  return std::abs(d) <= 0.5 ? expm1_taylor<10>(d) : exp_bounded(d) - 1.0;
}

// One channel's pass (expm1: a lambda, so it inlines and the loop vectorizes): A = sum P em, B = sum P^2 em,
// C = sum P^2 em^2 over jn keys.
template <class Expm1>
void sums(const double* P, const double* P2, const double* dl, double a, int64_t jn, double& A, double& B,
          double& C, Expm1 expm1) {
  double sa = 0, sb = 0, sc = 0;
#pragma omp simd reduction(+ : sa, sb, sc)
  for (int64_t j = 0; j < jn; ++j) {
    const double em = expm1(a * dl[j]);
    sa += P[j] * em;
    sb += P2[j] * em;
    sc += P2[j] * em * em;
  }
  A = sa;
  B = sb;
  C = sc;
}

// Shifts too large for exp in double (|d| > 300): the perturbed softmax recomputed from the
// logits (P may have underflowed to 0 exactly where the shift lands).
double sq_err_shifted(const double* logits, const double* p, int64_t len, int64_t kb, const double* dl,
                      int64_t jn, double a) {
  std::vector<double> l(logits, logits + len), ph(len);
  for (int64_t j = 0; j < jn; ++j) l[kb + j] += a * dl[j];
  double m = -INFINITY, z = 0, s = 0;
  for (double v : l) m = std::max(m, v);
  for (int64_t j = 0; j < len; ++j) z += (ph[j] = std::exp(l[j] - m));
  for (int64_t j = 0; j < len; ++j) s += (p[j] - ph[j] / z) * (p[j] - ph[j] / z);
  return s;
}

// sum_j P_j^2 (A - expm1(d_j))^2 term by term, for when the expanded form cancels (nearly
// one-hot attention on a quantized key): unquantized keys contribute P_j^2 A^2.
double sq_err_direct(const double* p2, int64_t len, int64_t kb, const double* dl, int64_t jn, double a,
                     double A) {
  double s = 0;
  for (int64_t j = 0; j < len; ++j) {
    const double em = j >= kb && j < kb + jn ? std::expm1(a * dl[j - kb]) : 0.0;
    s += p2[j] * (A - em) * (A - em);
  }
  return s;
}
// One (query, channel)'s sum of squared score errors from its sums; `direct` computes it term by
// term when the expanded form cancels (nearly one-hot attention on a quantized key: rare).
template <class Direct>
double finish(double A, double B, double C, double s0, Direct direct) {
  const double r = 1.0 + A;
  double num = C - 2.0 * A * B + A * A * s0;
  if (num < 1e-6 * C) num = direct();
  return num / (r * r);
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
      // the cheapest polynomial whose truncation stays below 1e-11 for this channel's largest |d|
      const double dmax = std::abs(a) * t.delta_absmax[c];
      if (dmax <= 0.01) {
        sums(P, P2, dl, a, jn, A, B, C,
             [](double d) { return expm1_taylor<4>(d); });  // 0.01^4 / 120 < 1e-10 relative
      } else if (dmax <= 0.1) {
        sums(P, P2, dl, a, jn, A, B, C,
             [](double d) { return expm1_taylor<7>(d); });  // 0.1^7 / 40320 < 3e-12
      } else if (dmax <= 0.5) {
        sums(P, P2, dl, a, jn, A, B, C,
             [](double d) { return expm1_taylor<10>(d); });  // 0.5^10 / 39916800 < 3e-11
      } else if (dmax <= 300) {
        sums(P, P2, dl, a, jn, A, B, C, [](double d) { return expm1_bounded(d); });
      } else {
        sq_err[c] += sq_err_shifted(logits.row(i).data(), p.data(), len, t.kb, dl, jn, a);
        continue;
      }
      sq_err[c] += finish(A, B, C, s0, [&] { return sq_err_direct(p2.data(), len, t.kb, dl, jn, a, A); });
    }
  }
}

void tile_sensitivity_from_sums(const HeadTask& t, const double* abc, const double* s0, double* sq_err) {
  if (t.count == 0) return;
  const double s = 1.0 / std::sqrt((double)t.D);
  std::vector<double> logits, p, p2;
  for (int64_t i = 0; i < t.count; ++i) {
    const int64_t pos = t.positions[i], len = pos + 1;
    const int64_t jn = std::clamp<int64_t>(len - t.kb, 0, t.n);
    if (jn == 0) continue;
    const float* q = t.q + pos * t.D;
    bool have_row = false;
    auto row = [&] {  // this query's logits and softmax, for the fallbacks only
      if (have_row) return;
      have_row = true;
      logits.assign(len, 0.0);
      p.resize(len);
      p2.resize(len);
      for (int64_t j = 0; j < len; ++j) {
        double x = 0;
        for (int64_t c = 0; c < t.D; ++c) x += ((double)q[c] * s) * t.k[j * t.D + c];
        logits[j] = x;
      }
      softmax(logits.data(), len, p.data());
      for (int64_t j = 0; j < len; ++j) p2[j] = p[j] * p[j];
    };
    for (int64_t c = 0; c < t.D; ++c) {
      const double a = (double)q[c] * s;  // as scaled_queries
      const double* dl = t.delta + c * t.n;
      if (std::abs(a) * t.delta_absmax[c] > 300) {
        row();
        sq_err[c] += sq_err_shifted(logits.data(), p.data(), len, t.kb, dl, jn, a);
        continue;
      }
      const double* x = abc + (i * t.D + c) * 3;
      sq_err[c] += finish(x[0], x[1], x[2], s0[i], [&] {
        row();
        return sq_err_direct(p2.data(), len, t.kb, dl, jn, a, x[0]);
      });
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
