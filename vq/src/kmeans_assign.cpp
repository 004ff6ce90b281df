#include "kmeans_assign.h"

#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <cstring>
#include <limits>

#include "kvlab/threads.h"

namespace kvlab::detail {

// GCC vector extensions: AVX-512 where the CPU has it, two AVX2 halves otherwise.
typedef float vf __attribute__((vector_size(64), aligned(4)));
typedef int32_t vi __attribute__((vector_size(64), aligned(4)));

void CentroidPack::build(const float* c, int64_t k_, int64_t d_) {
  k = k_;
  d = d_;
  blocks = (k + kLanes - 1) / kLanes;
  ct.assign(blocks * d * kLanes, 0.0f);
  norm2.assign(blocks * kLanes, std::numeric_limits<float>::infinity());
  for (int64_t i = 0; i < k; ++i) {
    const int64_t b = i / kLanes, l = i % kLanes;
    float s = 0;
    for (int64_t j = 0; j < d; ++j) {
      ct[(b * d + j) * kLanes + l] = c[i * d + j];
      s += c[i * d + j] * c[i * d + j];
    }
    norm2[i] = s;
  }
}

namespace {

inline vf load(const float* p) {
  vf v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

// acc + a * b, fused where the CPU has FMA (the project builds with -ffp-contract=off).
inline vf fmadd(vf a, vf b, vf acc) {
#if defined(__AVX512F__)
  return (vf)_mm512_fmadd_ps((__m512)a, (__m512)b, (__m512)acc);
#else
  return a * b + acc;
#endif
}

// Lowest index among the lanes holding the smallest value.
inline int32_t reduce(vf best, vi idx) {
#if defined(__AVX512F__)
  const __m512 b = (__m512)best;
  const __mmask16 at_min = _mm512_cmp_ps_mask(b, _mm512_set1_ps(_mm512_reduce_min_ps(b)), _CMP_EQ_OQ);
  return _mm512_mask_reduce_min_epi32(at_min,
                                      (__m512i)idx);  // GCC 12 warns inside this intrinsic (false positive)
#endif
  float bv = best[0];
  int32_t bi = idx[0];
  for (int l = 1; l < kLanes; ++l)
    if (best[l] < bv || (best[l] == bv && idx[l] < bi)) {
      bv = best[l];
      bi = idx[l];
    }
  return bi;
}

// P points at once; D > 0: compile-time dimension, D == 0: runtime pack.d.
template <int D, int P>
void assign_points(const float* x, const CentroidPack& pk, int32_t* out) {
  const int64_t d = D > 0 ? D : pk.d;
  vf best[P], acc[P], xm2[P][D > 0 ? D : 1];
  if constexpr (D > 0)
    for (int p = 0; p < P; ++p)
      for (int j = 0; j < D; ++j) xm2[p][j] = vf{} + (-2.0f * x[p * D + j]);
  vi bidx[P];
  vi lane;
  for (int l = 0; l < kLanes; ++l) lane[l] = l;
  for (int p = 0; p < P; ++p) {
    best[p] = vf{} + std::numeric_limits<float>::infinity();
    bidx[p] = lane;
  }
  for (int64_t b = 0; b < pk.blocks; ++b) {
    const float* cb = &pk.ct[b * d * kLanes];
    const vf nb = load(&pk.norm2[b * kLanes]);
    for (int p = 0; p < P; ++p) acc[p] = nb;
    for (int64_t j = 0; j < d; ++j) {
      const vf c = load(cb + j * kLanes);
      if constexpr (D > 0)
        for (int p = 0; p < P; ++p) acc[p] = fmadd(c, xm2[p][j], acc[p]);
      else
        for (int p = 0; p < P; ++p) acc[p] = fmadd(c, vf{} + (-2.0f * x[p * d + j]), acc[p]);
    }
    const vi ib = lane + (int32_t)(b * kLanes);
    for (int p = 0; p < P; ++p) {
      const vi m = acc[p] < best[p];  // strict: the earlier block keeps ties
      best[p] = m ? acc[p] : best[p];
      bidx[p] = m ? ib : bidx[p];
    }
  }
  for (int p = 0; p < P; ++p) out[p] = reduce(best[p], bidx[p]);
}

template <int D>
void assign_range(const float* x, int64_t n, const CentroidPack& pk, int32_t* out) {
  const int64_t d = pk.d;
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) assign_points<D, 4>(x + i * d, pk, out + i);
  for (; i < n; ++i) assign_points<D, 1>(x + i * d, pk, out + i);
}

using RangeFn = void (*)(const float*, int64_t, const CentroidPack&, int32_t*);

RangeFn pick(int64_t d) {
  switch (d) {
    case 1: return assign_range<1>;
    case 2: return assign_range<2>;
    case 3: return assign_range<3>;
    case 4: return assign_range<4>;
    case 6: return assign_range<6>;
    case 8: return assign_range<8>;
    case 16: return assign_range<16>;
    default: return assign_range<0>;
  }
}

}  // namespace

void assign_nearest(const float* x, int64_t n, const CentroidPack& pk, int32_t* assign, int threads) {
  const RangeFn fn = pick(pk.d);
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

}  // namespace kvlab::detail
