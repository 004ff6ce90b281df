#include "kmeans_assign.h"

#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "kvlab/threads.h"

namespace kvlab::detail {

void CentroidPack::build(const float* c, int64_t k_, int64_t d_) {
  k = k_;
  d = d_;
  blocks = (k + kLanes - 1) / kLanes;
  ct.assign(blocks * d * kLanes, 0.0f);
  norm2.assign(blocks * kLanes, std::numeric_limits<float>::infinity());
  double mx = 0;
  for (int64_t i = 0; i < k; ++i) {
    const int64_t b = i / kLanes, l = i % kLanes;
    float s = 0;
    double e = 0;
    for (int64_t j = 0; j < d; ++j) {
      ct[(b * d + j) * kLanes + l] = c[i * d + j];
      s += c[i * d + j] * c[i * d + j];  // rounded product, then rounded sum (no contraction)
      e += (double)c[i * d + j] * c[i * d + j];
    }
    norm2[i] = s;
    mx = std::max(mx, e);
  }
  max_norm = (float)(std::sqrt(mx) * (1 + 1e-6));
}

namespace {

// 16 floats (one packed block) and their lane indices, in the widest registers the CPU has.
// Every variant computes the same values: one rounding per fused multiply-add.
#if defined(__AVX512F__)
struct V16 {
  __m512 v;
  static V16 load(const float* p) { return {_mm512_loadu_ps(p)}; }
  static V16 set1(float f) { return {_mm512_set1_ps(f)}; }
  static V16 fma(V16 a, V16 b, V16 c) { return {_mm512_fmadd_ps(a.v, b.v, c.v)}; }
  void store(float* p) const { _mm512_storeu_ps(p, v); }
};
struct I16 {
  __m512i v;
  static I16 iota(int32_t base) {
    return {_mm512_add_epi32(_mm512_set1_epi32(base),
                             _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15))};
  }
  void store(int32_t* p) const { _mm512_storeu_si512(p, v); }
};
// best, idx <- acc, ib where acc < best (strict: the earlier block keeps ties); s2 <- the
// second-smallest seen, min(s2, max(acc, best)).
template <bool Second>
inline void keep_min(V16 acc, I16 ib, V16& best, I16& idx, V16& s2) {
  const __mmask16 m = _mm512_cmp_ps_mask(acc.v, best.v, _CMP_LT_OQ);
  if constexpr (Second) s2.v = _mm512_min_ps(s2.v, _mm512_max_ps(acc.v, best.v));
  best.v = _mm512_mask_mov_ps(best.v, m, acc.v);
  idx.v = _mm512_mask_mov_epi32(idx.v, m, ib.v);
}
#elif defined(__AVX2__) && defined(__FMA__)
struct V16 {
  __m256 lo, hi;
  static V16 load(const float* p) { return {_mm256_loadu_ps(p), _mm256_loadu_ps(p + 8)}; }
  static V16 set1(float f) { return {_mm256_set1_ps(f), _mm256_set1_ps(f)}; }
  static V16 fma(V16 a, V16 b, V16 c) {
    return {_mm256_fmadd_ps(a.lo, b.lo, c.lo), _mm256_fmadd_ps(a.hi, b.hi, c.hi)};
  }
  void store(float* p) const {
    _mm256_storeu_ps(p, lo);
    _mm256_storeu_ps(p + 8, hi);
  }
};
struct I16 {
  __m256 lo, hi;  // int32 bits kept in float registers (blends only)
  static I16 iota(int32_t base) {
    const __m256i b = _mm256_set1_epi32(base), l = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    return {_mm256_castsi256_ps(_mm256_add_epi32(b, l)),
            _mm256_castsi256_ps(_mm256_add_epi32(_mm256_add_epi32(b, l), _mm256_set1_epi32(8)))};
  }
  void store(int32_t* p) const {
    _mm256_storeu_ps((float*)p, lo);
    _mm256_storeu_ps((float*)p + 8, hi);
  }
};
template <bool Second>
inline void keep_min(V16 acc, I16 ib, V16& best, I16& idx, V16& s2) {
  const __m256 m0 = _mm256_cmp_ps(acc.lo, best.lo, _CMP_LT_OQ),
               m1 = _mm256_cmp_ps(acc.hi, best.hi, _CMP_LT_OQ);
  if constexpr (Second) {
    s2.lo = _mm256_min_ps(s2.lo, _mm256_max_ps(acc.lo, best.lo));
    s2.hi = _mm256_min_ps(s2.hi, _mm256_max_ps(acc.hi, best.hi));
  }
  best.lo = _mm256_blendv_ps(best.lo, acc.lo, m0);
  best.hi = _mm256_blendv_ps(best.hi, acc.hi, m1);
  idx.lo = _mm256_blendv_ps(idx.lo, ib.lo, m0);
  idx.hi = _mm256_blendv_ps(idx.hi, ib.hi, m1);
}
#else
struct V16 {
  float v[kLanes];
  static V16 load(const float* p) {
    V16 r;
    std::memcpy(r.v, p, sizeof r.v);
    return r;
  }
  static V16 set1(float f) {
    V16 r;
    std::fill(r.v, r.v + kLanes, f);
    return r;
  }
  static V16 fma(V16 a, V16 b, V16 c) {
    for (int l = 0; l < kLanes; ++l) c.v[l] = std::fma(a.v[l], b.v[l], c.v[l]);
    return c;
  }
  void store(float* p) const { std::memcpy(p, v, sizeof v); }
};
struct I16 {
  int32_t v[kLanes];
  static I16 iota(int32_t base) {
    I16 r;
    for (int l = 0; l < kLanes; ++l) r.v[l] = base + l;
    return r;
  }
  void store(int32_t* p) const { std::memcpy(p, v, sizeof v); }
};
template <bool Second>
inline void keep_min(V16 acc, I16 ib, V16& best, I16& idx, V16& s2) {
  for (int l = 0; l < kLanes; ++l) {
    if constexpr (Second) s2.v[l] = std::min(s2.v[l], std::max(acc.v[l], best.v[l]));
    if (acc.v[l] < best.v[l]) {
      best.v[l] = acc.v[l];
      idx.v[l] = ib.v[l];
    }
  }
}
#endif

// P points at once (xp[p]: point p's coordinates); D > 0: compile-time dimension, D == 0:
// runtime pack.d. Second: also the second-smallest f. out: nearest index (lowest on ties);
// ob, os: its f and the second-smallest f.
template <int D, int P, bool Second>
void assign_points(const float* const* xp, const CentroidPack& pk, int32_t* out, float* ob, float* os) {
  const int64_t d = D > 0 ? D : pk.d;
  constexpr float inf = std::numeric_limits<float>::infinity();
  V16 best[P], acc[P], s2[P];
  I16 bidx[P];
  float xm2s[P][D > 0 ? D : 1];
  if constexpr (D > 0)
    for (int p = 0; p < P; ++p)
      for (int j = 0; j < D; ++j) xm2s[p][j] = -2.0f * xp[p][j];
  for (int p = 0; p < P; ++p) {
    best[p] = V16::set1(inf);
    s2[p] = best[p];
    bidx[p] = I16::iota(0);
  }
  for (int64_t b = 0; b < pk.blocks; ++b) {
    const float* cb = &pk.ct[b * d * kLanes];
    const V16 nb = V16::load(&pk.norm2[b * kLanes]);
    for (int p = 0; p < P; ++p) acc[p] = nb;
    for (int64_t j = 0; j < d; ++j) {
      const V16 c = V16::load(cb + j * kLanes);
      for (int p = 0; p < P; ++p)
        acc[p] = V16::fma(c, V16::set1(D > 0 ? xm2s[p][D > 0 ? j : 0] : -2.0f * xp[p][j]), acc[p]);
    }
    const I16 ib = I16::iota((int32_t)(b * kLanes));
    for (int p = 0; p < P; ++p) keep_min<Second>(acc[p], ib, best[p], bidx[p], s2[p]);
  }
  for (int p = 0; p < P; ++p) {
    alignas(64) float bv[kLanes], sv[kLanes];
    alignas(64) int32_t iv[kLanes];
    best[p].store(bv);
    bidx[p].store(iv);
    int wl = 0;
    for (int l = 1; l < kLanes; ++l)
      if (bv[l] < bv[wl] || (bv[l] == bv[wl] && iv[l] < iv[wl])) wl = l;
    out[p] = iv[wl];
    if constexpr (Second) {
      s2[p].store(sv);
      float b2 = sv[wl];
      for (int l = 0; l < kLanes; ++l)
        if (l != wl) b2 = std::min(b2, std::min(bv[l], sv[l]));
      ob[p] = bv[wl];
      os[p] = b2;
    }
  }
}

template <int D>
void assign_range(const float* x, int64_t n, const CentroidPack& pk, int32_t* out) {
  const int64_t d = pk.d;
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) {
    const float* xp[4] = {x + i * d, x + (i + 1) * d, x + (i + 2) * d, x + (i + 3) * d};
    assign_points<D, 4, false>(xp, pk, out + i, nullptr, nullptr);
  }
  for (; i < n; ++i) {
    const float* xp[1] = {x + i * d};
    assign_points<D, 1, false>(xp, pk, out + i, nullptr, nullptr);
  }
}

template <int D>
void assign_list(const float* x, const int64_t* idx, int64_t m, const CentroidPack& pk, int32_t* assign,
                 float* best, float* second) {
  const int64_t d = pk.d;
  int64_t i = 0;
  int32_t a[4];
  float b[4], s[4];
  for (; i + 4 <= m; i += 4) {
    const float* xp[4] = {x + idx[i] * d, x + idx[i + 1] * d, x + idx[i + 2] * d, x + idx[i + 3] * d};
    assign_points<D, 4, true>(xp, pk, a, b, s);
    for (int p = 0; p < 4; ++p) {
      assign[idx[i + p]] = a[p];
      best[idx[i + p]] = b[p];
      second[idx[i + p]] = s[p];
    }
  }
  for (; i < m; ++i) {
    const float* xp[1] = {x + idx[i] * d};
    assign_points<D, 1, true>(xp, pk, a, b, s);
    assign[idx[i]] = a[0];
    best[idx[i]] = b[0];
    second[idx[i]] = s[0];
  }
}

using RangeFn = void (*)(const float*, int64_t, const CentroidPack&, int32_t*);
using ListFn = void (*)(const float*, const int64_t*, int64_t, const CentroidPack&, int32_t*, float*, float*);

template <int D>
struct Fns {
  static constexpr RangeFn range = assign_range<D>;
  static constexpr ListFn list = assign_list<D>;
};

template <class F>
auto pick(int64_t d, F f) {
  switch (d) {
    case 1: return f(Fns<1>{});
    case 2: return f(Fns<2>{});
    case 3: return f(Fns<3>{});
    case 4: return f(Fns<4>{});
    case 6: return f(Fns<6>{});
    case 8: return f(Fns<8>{});
    case 16: return f(Fns<16>{});
    default: return f(Fns<0>{});
  }
}

// d = 1 (kvquant's per-channel levels): points across the vector lanes instead of centroids.
// With one coordinate, the centroid-major kernel spends most of each point in its 16-lane
// reduction. Here each centroid in index order updates a block of points: f = fma(c, -2x,
// ||c||^2), the same single rounding as the packed kernel, and only a strictly smaller f
// replaces, so the lowest index with the smallest f wins as there.
void assign_range_d1(const float* x, int64_t n, const CentroidPack& pk, int32_t* out) {
  constexpr int64_t kP = 64;
  for (int64_t i0 = 0; i0 < n; i0 += kP) {
    const int64_t m = std::min(kP, n - i0);
    float m2x[kP], best[kP];
    int32_t idx[kP];
    for (int64_t i = 0; i < m; ++i) {
      m2x[i] = -2.0f * x[i0 + i];
      best[i] = std::numeric_limits<float>::infinity();
      idx[i] = 0;
    }
    for (int64_t c = 0; c < pk.k; ++c) {
      const float cc = pk.ct[(c / kLanes) * kLanes + c % kLanes], nn = pk.norm2[c];
      for (int64_t i = 0; i < m; ++i) {
        const float f = std::fma(cc, m2x[i], nn);
        const bool lt = f < best[i];
        best[i] = lt ? f : best[i];
        idx[i] = lt ? (int32_t)c : idx[i];
      }
    }
    std::copy(idx, idx + m, out + i0);
  }
}

}  // namespace

void assign_nearest(const float* x, int64_t n, const CentroidPack& pk, int32_t* assign, int threads) {
  const RangeFn fn = pk.d == 1 ? assign_range_d1 : pick(pk.d, [](auto t) { return decltype(t)::range; });
  constexpr int64_t kBlock = 256;  // points per task: fixed, so the split never depends on threads
  const int64_t nb = (n + kBlock - 1) / kBlock;
  const int nt = resolve_threads(threads);
  // Small jobs stay on one thread: on a busy machine a barrier can cost a whole time slice.
  const bool par = nt > 1 && nb > 1 && (double)n * pk.blocks * kLanes * pk.d >= (1 << 22);
#pragma omp parallel for schedule(static) num_threads(nt) if (par)
  for (int64_t b = 0; b < nb; ++b) {
    const int64_t i0 = b * kBlock, m = std::min(kBlock, n - i0);
    fn(x + i0 * pk.d, m, pk, assign + i0);
  }
}

void assign_listed(const float* x, const int64_t* idx, int64_t m, const CentroidPack& pk, int32_t* assign,
                   float* best, float* second) {
  pick(pk.d, [](auto t) { return decltype(t)::list; })(x, idx, m, pk, assign, best, second);
}

}  // namespace kvlab::detail
