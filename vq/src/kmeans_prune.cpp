#include "kmeans_prune.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "kvlab/threads.h"

namespace kvlab::detail {

namespace {
constexpr int64_t kBlock = 256;                       // points per task (results do not depend on the split)
constexpr double kUp = 1 + 1e-12, kDown = 1 - 1e-12;  // double rounding of the bounds themselves
}  // namespace

PrunedAssign::PrunedAssign(const float* x, int64_t n, int64_t d, int threads)
    : x_(x), n_(n), d_(d), nt_(resolve_threads(threads)), xnorm_(n), u_(n), l_(n), fb_(n), fs_(n) {
  for (int64_t i = 0; i < n; ++i) {
    double s = 0;
    for (int64_t j = 0; j < d; ++j) s += (double)x[i * d + j] * x[i * d + j];
    xnorm_[i] = std::sqrt(s);
  }
}

void PrunedAssign::assign(const float* c, const CentroidPack& pk, int32_t* assign) {
  const int64_t n = n_, d = d_, k = pk.k;
  const bool fresh = k != k_;
  // Centroid movement since the last call: the largest and second-largest, and which is largest.
  std::vector<double> drift(k, 0.0);
  double m1 = 0, m2 = 0;
  int64_t a1 = -1;
  if (!fresh)
    for (int64_t ci = 0; ci < k; ++ci) {
      double s = 0;
      for (int64_t j = 0; j < d; ++j) {
        const double t = (double)c[ci * d + j] - prev_[ci * d + j];
        s += t * t;
      }
      drift[ci] = std::sqrt(s) * kUp;
      if (drift[ci] > m1) {
        m2 = m1;
        m1 = drift[ci];
        a1 = ci;
      } else {
        m2 = std::max(m2, drift[ci]);
      }
    }
  // |f - (||x - c||^2 - ||x||^2)| <= g (C^2 + 2 ||x|| C) for the kernel's float arithmetic (d + 1
  // roundings in ||c||^2, d in the FMA chain, each relative to at most C^2 + 2 ||x|| C), doubled.
  const double g = (4.0 * d + 16) * 0x1.0p-24, C = pk.max_norm;
  const int64_t nb = (n + kBlock - 1) / kBlock;
  int64_t scanned = 0;
  const bool par = nt_ > 1 && nb > 1 && (double)n * k * d >= (1 << 22);
#pragma omp parallel num_threads(nt_) if (par) reduction(+ : scanned)
  {
    std::vector<int64_t> list(kBlock);
#pragma omp for schedule(dynamic, 16)
    for (int64_t b = 0; b < nb; ++b) {
      const int64_t i0 = b * kBlock, i1 = std::min(n, i0 + kBlock);
      int64_t m = 0;
      for (int64_t i = i0; i < i1; ++i) {
        if (fresh) {
          list[m++] = i;
          continue;
        }
        const int64_t a = assign[i];
        const double e2 = 2 * g * (C * C + 2 * xnorm_[i] * C);
        double u = u_[i] + drift[a];
        const double l = std::max(0.0, (l_[i] - (a == a1 ? m2 : m1)) * kDown);
        l_[i] = l;
        if (u * u + e2 < l * l) {
          u_[i] = u;
          continue;
        }
        double s = 0;  // tighten u to the exact distance to the current centroid
        for (int64_t j = 0; j < d; ++j) {
          const double t = (double)x_[i * d + j] - c[a * d + j];
          s += t * t;
        }
        u = std::sqrt(s) * kUp;
        u_[i] = u;
        if (u * u + e2 < l * l) continue;
        list[m++] = i;
      }
      if (m == 0) continue;
      assign_listed(x_, list.data(), m, pk, assign, fb_.data(), fs_.data());
      scanned += m;
      // New bounds from the scan's f values: ||x - c||^2 = f + ||x||^2 within the rounding margin.
      for (int64_t t = 0; t < m; ++t) {
        const int64_t i = list[t];
        const double x2 = xnorm_[i] * xnorm_[i], e = g * (C * C + 2 * xnorm_[i] * C);
        u_[i] = std::sqrt(std::max(0.0, (double)fb_[i] + x2 + e)) * kUp;
        l_[i] = std::isinf(fs_[i]) ? std::numeric_limits<double>::infinity()
                                   : std::sqrt(std::max(0.0, (double)fs_[i] + x2 - e)) * kDown;
      }
    }
  }
  scanned_ = scanned;
  k_ = k;
  prev_.assign(c, c + k * d);
}

}  // namespace kvlab::detail
