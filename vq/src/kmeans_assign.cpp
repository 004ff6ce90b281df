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

// W floats of one packed block (W = 16 with AVX-512, 8 with AVX2: a block is then two groups of 8
// lanes) and their centroid indices. Every variant computes the same values: one rounding per
// fused multiply-add. A lane keeps the lowest index of its smallest f (strict < over increasing
// index), so the nearest centroid (smallest f, lowest index) does not depend on W.
#if defined(__AVX512F__)
struct Vec {
  static constexpr int W = 16;
  __m512 v;
  static Vec load(const float* p) { return {_mm512_loadu_ps(p)}; }
  // Keeps a loaded vector in a register: otherwise GCC folds its load into every FMA using it,
  // and the loads (one per point) instead of the FMAs bound the kernel.
  void pin() { asm("" : "+v"(v)); }
  static Vec set1(float f) { return {_mm512_set1_ps(f)}; }
  static Vec fma(Vec a, Vec b, Vec c) { return {_mm512_fmadd_ps(a.v, b.v, c.v)}; }
  static Vec min(Vec a, Vec b) { return {_mm512_min_ps(a.v, b.v)}; }
  static Vec max(Vec a, Vec b) { return {_mm512_max_ps(a.v, b.v)}; }
  void store(float* p) const { _mm512_storeu_ps(p, v); }
};
struct Idx {
  __m512i v;
  static Idx iota() { return {_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15)}; }
  Idx plus(int32_t k) const { return {_mm512_add_epi32(v, _mm512_set1_epi32(k))}; }
  void store(int32_t* p) const { _mm512_storeu_si512(p, v); }
};
// best, idx <- acc, ib where acc < best (strict: the earlier group keeps ties).
inline void keep_min(Vec acc, Idx ib, Vec& best, Idx& idx) {
  const __mmask16 m = _mm512_cmp_ps_mask(acc.v, best.v, _CMP_LT_OQ);
  best.v = _mm512_mask_mov_ps(best.v, m, acc.v);
  idx.v = _mm512_mask_mov_epi32(idx.v, m, ib.v);
}
// The smallest value and, among the lanes holding it, the smallest index. best never holds a
// NaN (keep_min's strict < never takes one), so min and == see every lane.
inline int32_t argmin(Vec best, Idx idx) {
  const __m512 m = _mm512_set1_ps(_mm512_reduce_min_ps(best.v));
  const __mmask16 eq = _mm512_cmp_ps_mask(best.v, m, _CMP_EQ_OQ);
  return _mm512_mask_reduce_min_epi32(eq, idx.v);
}
#elif defined(__AVX2__) && defined(__FMA__)
struct Vec {
  static constexpr int W = 8;
  __m256 v;
  static Vec load(const float* p) { return {_mm256_loadu_ps(p)}; }
  void pin() { asm("" : "+x"(v)); }  // as above
  static Vec set1(float f) { return {_mm256_set1_ps(f)}; }
  static Vec fma(Vec a, Vec b, Vec c) { return {_mm256_fmadd_ps(a.v, b.v, c.v)}; }
  static Vec min(Vec a, Vec b) { return {_mm256_min_ps(a.v, b.v)}; }
  static Vec max(Vec a, Vec b) { return {_mm256_max_ps(a.v, b.v)}; }
  void store(float* p) const { _mm256_storeu_ps(p, v); }
};
struct Idx {
  __m256 v;  // int32 bits kept in a float register (blends only)
  static Idx iota() { return {_mm256_castsi256_ps(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7))}; }
  Idx plus(int32_t k) const {
    return {_mm256_castsi256_ps(_mm256_add_epi32(_mm256_castps_si256(v), _mm256_set1_epi32(k)))};
  }
  void store(int32_t* p) const { _mm256_storeu_ps((float*)p, v); }
};
inline void keep_min(Vec acc, Idx ib, Vec& best, Idx& idx) {
  const __m256 m = _mm256_cmp_ps(acc.v, best.v, _CMP_LT_OQ);
  best.v = _mm256_blendv_ps(best.v, acc.v, m);
  idx.v = _mm256_blendv_ps(idx.v, ib.v, m);
}
inline int32_t argmin(Vec best, Idx idx) {
  __m256 m = _mm256_min_ps(best.v, _mm256_permute2f128_ps(best.v, best.v, 1));
  m = _mm256_min_ps(m, _mm256_shuffle_ps(m, m, 0x4e));
  m = _mm256_min_ps(m, _mm256_shuffle_ps(m, m, 0xb1));
  const __m256i big = _mm256_set1_epi32(INT32_MAX);
  __m256i c = _mm256_blendv_epi8(big, _mm256_castps_si256(idx.v),
                                 _mm256_castps_si256(_mm256_cmp_ps(best.v, m, _CMP_EQ_OQ)));
  c = _mm256_min_epi32(c, _mm256_permute2x128_si256(c, c, 1));
  c = _mm256_min_epi32(c, _mm256_shuffle_epi32(c, 0x4e));
  c = _mm256_min_epi32(c, _mm256_shuffle_epi32(c, 0xb1));
  return _mm256_cvtsi256_si32(c);
}
#else
struct Vec {
  static constexpr int W = 8;
  float v[W];
  static Vec load(const float* p) {
    Vec r;
    std::memcpy(r.v, p, sizeof r.v);
    return r;
  }
  void pin() {}
  static Vec set1(float f) {
    Vec r;
    std::fill(r.v, r.v + W, f);
    return r;
  }
  static Vec fma(Vec a, Vec b, Vec c) {
    for (int l = 0; l < W; ++l) c.v[l] = std::fma(a.v[l], b.v[l], c.v[l]);
    return c;
  }
  static Vec min(Vec a, Vec b) {
    for (int l = 0; l < W; ++l) a.v[l] = std::min(a.v[l], b.v[l]);
    return a;
  }
  static Vec max(Vec a, Vec b) {
    for (int l = 0; l < W; ++l) a.v[l] = std::max(a.v[l], b.v[l]);
    return a;
  }
  void store(float* p) const { std::memcpy(p, v, sizeof v); }
};
struct Idx {
  int32_t v[Vec::W];
  static Idx iota() {
    Idx r;
    for (int l = 0; l < Vec::W; ++l) r.v[l] = l;
    return r;
  }
  Idx plus(int32_t k) const {
    Idx r = *this;
    for (int l = 0; l < Vec::W; ++l) r.v[l] += k;
    return r;
  }
  void store(int32_t* p) const { std::memcpy(p, v, sizeof v); }
};
inline void keep_min(Vec acc, Idx ib, Vec& best, Idx& idx) {
  for (int l = 0; l < Vec::W; ++l)
    if (acc.v[l] < best.v[l]) {
      best.v[l] = acc.v[l];
      idx.v[l] = ib.v[l];
    }
}
inline int32_t argmin(Vec best, Idx idx) {
  int wl = 0;
  for (int l = 1; l < Vec::W; ++l)
    if (best.v[l] < best.v[wl] || (best.v[l] == best.v[wl] && idx.v[l] < idx.v[wl])) wl = l;
  return idx.v[wl];
}
#endif
constexpr int W = Vec::W, kGroups = kLanes / W;  // groups of W lanes per packed block

// Points per call: as many as the registers hold (P accumulators, P bests and P indices, P
// second-smallest values with Second, one centroid vector, one broadcast); each loaded centroid
// vector serves them all.
constexpr int kPoints = W == 16 ? 8 : 4, kPointsSecond = W == 16 ? 6 : 3;

// P points at once; xm2[p * d + j] = -2 x_pj (exact). D > 0: compile-time dimension, D == 0:
// runtime pack.d. Second: also the second-smallest f. out: nearest index (lowest on ties);
// ob, os: its f and the second-smallest f.
template <int D, int P, bool Second>
void assign_points(const float* xm2, const CentroidPack& pk, int32_t* out, float* ob, float* os) {
  const int64_t d = D > 0 ? D : pk.d, groups = pk.blocks * kGroups;
  constexpr float inf = std::numeric_limits<float>::infinity();
  Vec best[P], acc[P], s2[P];
  Idx bidx[P];
  for (int p = 0; p < P; ++p) {
    best[p] = Vec::set1(inf);
    s2[p] = best[p];
    bidx[p] = Idx::iota();
  }
  Idx ib = Idx::iota();
  for (int64_t g = 0; g < groups; ++g, ib = ib.plus(W)) {
    // group g: lanes (g % kGroups) * W.. of block g / kGroups, centroids g * W..
    const float* cb = &pk.ct[(g / kGroups) * d * kLanes + (g % kGroups) * W];
    const Vec nb = Vec::load(&pk.norm2[g * W]);
    for (int p = 0; p < P; ++p) acc[p] = nb;
    for (int64_t j = 0; j < d; ++j) {
      Vec c = Vec::load(cb + j * kLanes);
      c.pin();
      for (int p = 0; p < P; ++p) acc[p] = Vec::fma(c, Vec::set1(xm2[p * d + j]), acc[p]);
    }
    for (int p = 0; p < P; ++p) {
      if constexpr (Second) s2[p] = Vec::min(s2[p], Vec::max(acc[p], best[p]));
      keep_min(acc[p], ib, best[p], bidx[p]);
    }
  }
  for (int p = 0; p < P; ++p) {
    if constexpr (!Second) {
      out[p] = argmin(best[p], bidx[p]);
    } else {
      alignas(64) float bv[W], sv[W];
      alignas(64) int32_t iv[W];
      best[p].store(bv);
      bidx[p].store(iv);
      s2[p].store(sv);
      int wl = 0;
      for (int l = 1; l < W; ++l)
        if (bv[l] < bv[wl] || (bv[l] == bv[wl] && iv[l] < iv[wl])) wl = l;
      float b2 = sv[wl];  // the second-smallest: in the winner's lane, or another lane's best
      for (int l = 0; l < W; ++l)
        if (l != wl) b2 = std::min(b2, bv[l]);
      out[p] = iv[wl];
      ob[p] = bv[wl];
      os[p] = b2;
    }
  }
}

// -2 x of P points (rows xp[p]) into xm2[p * d ..].
template <int P>
inline void scale_points(const float* const* xp, int64_t d, float* xm2) {
  for (int p = 0; p < P; ++p)
    for (int64_t j = 0; j < d; ++j) xm2[p * d + j] = -2.0f * xp[p][j];
}

template <int D>
void assign_range(const float* x, int64_t n, const CentroidPack& pk, int32_t* out) {
  const int64_t d = pk.d;
  constexpr int P = kPoints;
  std::vector<float> xm2(P * d);
  int64_t i = 0;
  for (; i + P <= n; i += P) {
    const float* xp[P];
    for (int p = 0; p < P; ++p) xp[p] = x + (i + p) * d;
    scale_points<P>(xp, d, xm2.data());
    assign_points<D, P, false>(xm2.data(), pk, out + i, nullptr, nullptr);
  }
  for (; i < n; ++i) {
    const float* xp[1] = {x + i * d};
    scale_points<1>(xp, d, xm2.data());
    assign_points<D, 1, false>(xm2.data(), pk, out + i, nullptr, nullptr);
  }
}

template <int D>
void assign_list(const float* x, const int64_t* idx, int64_t m, const CentroidPack& pk, int32_t* assign,
                 float* best, float* second) {
  const int64_t d = pk.d;
  constexpr int P = kPointsSecond;
  std::vector<float> xm2(P * d);
  int64_t i = 0;
  int32_t a[P];
  float b[P], s[P];
  for (; i + P <= m; i += P) {
    const float* xp[P];
    for (int p = 0; p < P; ++p) xp[p] = x + idx[i + p] * d;
    scale_points<P>(xp, d, xm2.data());
    assign_points<D, P, true>(xm2.data(), pk, a, b, s);
    for (int p = 0; p < P; ++p) {
      assign[idx[i + p]] = a[p];
      best[idx[i + p]] = b[p];
      second[idx[i + p]] = s[p];
    }
  }
  for (; i < m; ++i) {
    const float* xp[1] = {x + idx[i] * d};
    scale_points<1>(xp, d, xm2.data());
    assign_points<D, 1, true>(xm2.data(), pk, a, b, s);
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
    case 32: return f(Fns<32>{});
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
