// The tiled attention kernel; the math is explained in attend.h.
#include "attend.h"

#include <Eigen/Core>
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <ctime>
#include <limits>

namespace kvlab::detail {

namespace {

using MatF = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::ColMajor>;
using RowMatF = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using ArrF = Eigen::Array<float, Eigen::Dynamic, 1>;

constexpr float kNegInf = -std::numeric_limits<float>::infinity();
// Weights exp(x) below FLT_MIN (x < -87.3) are flushed to 0: no denormals enter the sums, and
// masked entries (-inf) become exact zeros. Such weights are < 1e-37 of
// the row's largest.
constexpr float kWeightFloor = std::numeric_limits<float>::min();
// Below this |delta| the Taylor series give d and w (attend.h); truncation error < 1e-9 relative.
constexpr float kSeriesLimit = 0.125f;
// Below this, a normalizer on the other distribution's scale has lost its precision (the two
// distributions are ~46 nats apart): such rows are recomputed exactly (exact_row.cpp).
constexpr double kFarApart = 1e-20;
// Columns summed in fp32 before the fp64 row sums take over: 16 terms keep the float rounding
// near 1e-7 relative.
constexpr int64_t kChunk = 16;

// y = exp(x) elementwise (x <= 0), 0 below kWeightFloor; y may alias x. Both are 64-byte
// aligned with room for n rounded up to kPacket: Eigen's vector exp then covers every element
// (no scalar head or tail, whose libm expf rounds differently), so a value's weight does not
// depend on where it sits in the tile.
constexpr int64_t kPacket = 16;
int64_t padded(int64_t n) { return (n + kPacket - 1) / kPacket * kPacket; }

void exp_floor(const float* x, float* y, int64_t n) {
  const int64_t np = padded(n);
  Eigen::Map<ArrF, Eigen::Aligned64>(y, np) = Eigen::Map<const ArrF, Eigen::Aligned64>(x, np).exp();
  for (int64_t i = 0; i < n; ++i) y[i] = y[i] >= kWeightFloor ? y[i] : 0.0f;
}

// a where c, else b, by bit masks: GCC under trapping math (the default) does not if-convert a
// ?: whose arms it has sunk into branches, which kept metric_column scalar.
inline float select_bits(bool c, float a, float b) {
  const uint32_t m = 0u - (uint32_t)c;
  return std::bit_cast<float>((std::bit_cast<uint32_t>(a) & m) | (std::bit_cast<uint32_t>(b) & ~m));
}

// One column of the metric sums (attend.h) over nb rows. A function of its own, with restrict
// arguments, so GCC vectorizes it; both arms of each select are computed, then chosen by bits.
// e: reference weights on M's scale, f: exp(M - S) per row, eh: the method's weights on S's.
// Adds one column into the fp32 partial sums p[kSums][nb] (the order of MethodSum).
void metric_column(const float* __restrict e, const float* __restrict f, const float* __restrict eh,
                   const float* __restrict delta, int64_t nb, float* __restrict zh, float* __restrict zd,
                   float* __restrict a, float* __restrict b, float* __restrict c, float* __restrict w,
                   float* __restrict x2, float* __restrict k, float* __restrict ka) {
  for (int64_t i = 0; i < nb; ++i) {
    const float x = delta[i], ev = e[i] * f[i], ehv = eh[i];
    // 1 - exp(-x) and x - 1 + exp(-x) by Horner (Taylor to x^6 and x^7).
    const float em =
        x * (1.0f + x * (-0.5f + x * (1.0f / 6 + x * (-1.0f / 24 + x * (1.0f / 120 + x * (-1.0f / 720))))));
    const float rr =
        x * x *
        (0.5f +
         x * (-1.0f / 6 + x * (1.0f / 24 + x * (-1.0f / 120 + x * (1.0f / 720 + x * (-1.0f / 5040))))));
    const bool series = std::fabs(x) <= kSeriesLimit;
    const float d_series = ev * em, d_direct = ev - ehv;
    const float d = select_bits(series, d_series, d_direct);
    const float w_series = ev * rr, w_direct = ev * x - d;
    const float wv = select_bits(series, w_series, w_direct);
    zh[i] += ehv;
    zd[i] += d;
    a[i] += d * d;
    b[i] += d * ehv;
    c[i] += ehv * ehv;
    w[i] += wv;
    x2[i] += ev * ehv;
    k[i] += ev * x;
    ka[i] += ev * std::fabs(x);
  }
}

// A row's errors from its sums. Each metric has two exact rewrites; the one whose terms are
// smaller (less cancellation) is used:
//   score: (A + 2 c B + c^2 C) / Zs^2 (close distributions: d small) or
//          sum P^2 - 2 sum P P_hat + sum P_hat^2 (far apart: the d-form's terms grow as 1 / Zs^2)
//   KL:    W / Zs + x + log1p(-x) (close: W is second order, x enters squared) or
//          E_P[delta] + log(Z_hat / Zs) (far apart: x is large and cancels against W)
RowErrors row_errors(const MethodRows& s, int64_t r, int64_t B, double zs, double p2, const double* o,
                     double Z, int64_t D) {
  const double zh = s.sum[Zh][r], zd = s.sum[Zd][r], c = -zd / zh;
  const double a = s.sum[A][r], b = s.sum[Bd][r], cc = s.sum[C][r];
  RowErrors e;
  const double d_terms = (a + 2 * std::fabs(c * b) + c * c * cc) / (zs * zs);
  const double pp = s.sum[X2][r] / (zs * zh), ph2 = cc / (zh * zh);
  const double direct_terms = p2 + 2 * pp + ph2;
  e.score_sq = d_terms <= direct_terms ? (a + 2 * c * b + c * c * cc) / (zs * zs) : p2 - 2 * pp + ph2;
  const double x = zd / zs, log_ratio = std::fabs(x) < 0.5 ? std::log1p(-x) : std::log(zh / zs);
  // Rounding in the W-form: W's own, plus x's (relative to sum |d| ~ Ka) times d(x + log1p(-x))/dx
  // = x / (1 - x); in the K-form: K's (relative to Ka) plus the log ratio's.
  const double ka = s.sum[Ka][r] / zs;
  const double w_terms = s.sum[W][r] / zs + ka * std::fabs(x / (1 - x));
  const double k_terms = ka + std::fabs(log_ratio);
  e.kl = w_terms <= k_terms ? s.sum[W][r] / zs + x + log_ratio : s.sum[K][r] / zs + log_ratio;
  for (int64_t d = 0; d < D; ++d) {
    const double diff = o[d] / Z - s.acc[d * B + r] / zh;
    e.out_sq += diff * diff;
  }
  return e;
}

// acc (D x B col-major, rows offset already applied): row i times scale[i], for the nb rows.
// Column by column, contiguous: a row at a time strode B doubles per channel (cache misses were
// most of mask_and_rescale); rows not rescaled have scale 1, exact.
void scale_columns(double* __restrict acc, const double* __restrict scale, int64_t nb, int64_t D, int64_t B) {
  for (int64_t d = 0; d < D; ++d)
    for (int64_t i = 0; i < nb; ++i) acc[d * B + i] *= scale[i];
}

// acc (D x B col-major, rows offset already applied) += O (nb x D col-major), in fp64.
void add_columns(const float* __restrict O, int64_t nb, int64_t D, double* __restrict acc, int64_t B) {
  for (int64_t d = 0; d < D; ++d)
    for (int64_t i = 0; i < nb; ++i) acc[d * B + i] += O[d * nb + i];
}

template <class V>
void grow(V& v, size_t n) {
  if (v.size() < n) v.resize(n);
}

}  // namespace

// Lap timer: adds the thread's CPU time since the last lap to an AttentionTimes field (CPU, not
// wall time, so the split stays meaningful on a busy machine); free when times is null.
class Laps {
 public:
  explicit Laps(AttentionTimes* t) : t_(t) {
    if (t_) last_ = now();
  }
  void lap(double AttentionTimes::*field) {
    if (!t_) return;
    const double n = now();
    t_->*field += n - last_;
    last_ = n;
  }

 private:
  static double now() {
    timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
  }
  AttentionTimes* t_;
  double last_ = 0;
};

void TileKernel::resize(const TileJob& j) {
  const size_t tile = padded(j.B * j.key_tile), rows = j.B, out = j.B * j.D;
  for (auto* v : {&L_, &X_, &E_, &Eh_}) grow(*v, tile);
  grow(O_, out);
  grow(o_row_, j.D);
  grow(part_, kSums * rows);
  grow(mrow_, rows);
  grow(tmax_, rows);
  grow(z_, rows);
  grow(z2_, rows);
  grow(acc_, out);
  grow(scale_, rows);
  if (Dm_.size() < (size_t)j.M) {
    Dm_.resize(j.M);
    tmax_m_.resize(j.M);
    mr_.resize(j.M);
  }
  for (int m = 0; m < j.M; ++m) {
    grow(Dm_[m], tile);
    grow(tmax_m_[m], rows);
    auto& r = mr_[m];
    for (auto* v : {&r.smax, &r.gap, &r.f}) grow(*v, rows);
    for (auto& v : r.sum) grow(v, rows);
    grow(r.acc, out);
  }
  grow(top_, (1 + j.M) * rows);
  grow(thr_, rows);
  grow(col_, rows);
  grow(flag_, (rows + 7) / 8 * 8);
}

void TileKernel::update_topk(TopK* top, const float* L, const float* delta, const float* tmax, int64_t nb,
                             int64_t n, int64_t s0) {
  // Most tiles hold no candidate once the top-k has filled: test every row's tile maximum first,
  // then whole columns (vectorized across rows), and push only where a value beats its row.
  float* thr = thr_.data();
  int any = 0;
  for (int64_t i = 0; i < nb; ++i) {
    thr[i] = top[i].threshold();
    any |= tmax[i] >= thr[i];
  }
  if (!any) return;
  float* col = col_.data();
  uint8_t* flag = flag_.data();  // room for nb rounded up to 8, the padding stays 0
  std::fill_n(flag, (nb + 7) / 8 * 8, 0);
  for (int64_t c = 0; c < n; ++c) {
    const float* l = L + c * nb;
    if (delta) {
      const float* dl = delta + c * nb;
      for (int64_t i = 0; i < nb; ++i) col[i] = l[i] - dl[i];
    } else {
      std::copy_n(l, nb, col);
    }
    int hit = 0;
    for (int64_t i = 0; i < nb; ++i) {
      flag[i] = col[i] >= thr[i];
      hit |= flag[i];
    }
    if (!hit) continue;
    // Usually a few rows of the column: skip 8 flags at a time.
    for (int64_t w = 0; w < nb; w += 8) {
      uint64_t word;
      std::memcpy(&word, flag + w, 8);
      if (!word) continue;
      for (int64_t i = w; i < std::min(nb, w + 8); ++i)
        if (flag[i]) {
          top[i].push(col[i], s0 + c);
          thr[i] = top[i].threshold();
        }
    }
  }
}

void TileKernel::reset(const TileJob& j) {
  const int64_t B = j.B, D = j.D;
  std::fill_n(mrow_.begin(), B, kNegInf);
  std::fill_n(z_.begin(), B, 0.0);
  std::fill_n(z2_.begin(), B, 0.0);
  std::fill_n(acc_.begin(), B * D, 0.0);
  for (int m = 0; m < j.M; ++m) {
    auto& r = mr_[m];
    std::fill_n(r.smax.begin(), B, kNegInf);
    for (auto& v : r.sum) std::fill_n(v.begin(), B, 0.0);
    std::fill_n(r.acc.begin(), B * D, 0.0);
  }
  for (int64_t i = 0; i < (1 + j.M) * B; ++i) top_[i].count = 0;
}

void TileKernel::logits(const TileJob& j, const KeyTile& t) {
  const int64_t D = j.D, nb = t.nb, n = t.n, s0 = t.s0;
  const Eigen::Map<const RowMatF> Q(j.q + t.r0 * D, nb, D);
  // Logits of the reference and the logit differences of each method (fp32 GEMMs).
  Eigen::Map<MatF> L(L_.data(), nb, n);
  L.noalias() = Q * Eigen::Map<const RowMatF>(j.k + s0 * D, n, D).transpose();
  for (int m = 0; m < j.M; ++m) {
    Eigen::Map<MatF> Dm(Dm_[m].data(), nb, n);
    Dm.noalias() = Q * Eigen::Map<const RowMatF>(j.methods[m].dk + s0 * D, n, D).transpose();
  }
}

void TileKernel::mask_and_rescale(const TileJob& j, const KeyTile& t) {
  const int64_t B = j.B, D = j.D, nb = t.nb, n = t.n, r0 = t.r0;
  // Causal mask: key s0 + c is visible to query row i when s0 + c <= pos.
  float* Lp = L_.data();
  for (int64_t i = 0; i < nb; ++i)
    for (int64_t c = std::max<int64_t>(0, j.pos[r0 + i] - t.s0 + 1); c < n; ++c) Lp[c * nb + i] = kNegInf;

  // The reference's running max M; rescale what was summed under the old one.
  float* tmax = tmax_.data();
  std::fill_n(tmax, nb, kNegInf);
  for (int64_t c = 0; c < n; ++c)
    for (int64_t i = 0; i < nb; ++i) tmax[i] = std::max(tmax[i], Lp[c * nb + i]);
  double* scale = scale_.data();
  bool any = false;
  for (int64_t i = 0; i < nb; ++i) {
    const int64_t r = r0 + i;
    const float mx = std::max(mrow_[r], tmax[i]);
    scale[i] = 1.0;
    if (mx > mrow_[r] && mrow_[r] != kNegInf) {
      const double a = std::exp((double)mrow_[r] - (double)mx);
      z_[r] *= a;
      z2_[r] *= a * a;
      scale[i] = a, any = true;
    }
    mrow_[r] = mx;
  }
  if (any) scale_columns(acc_.data() + r0, scale, nb, D, B);
  // Each method's running scale S >= M (its own largest logit or M); rescale its sums.
  for (int m = 0; m < j.M; ++m) {
    auto& s = mr_[m];
    float* tm = tmax_m_[m].data();
    const float* dm = Dm_[m].data();
    std::fill_n(tm, nb, kNegInf);
    for (int64_t c = 0; c < n; ++c)
      for (int64_t i = 0; i < nb; ++i) tm[i] = std::max(tm[i], Lp[c * nb + i] - dm[c * nb + i]);
    any = false;
    for (int64_t i = 0; i < nb; ++i) {
      const int64_t r = r0 + i;
      const float sx = std::max({s.smax[r], mrow_[r], tm[i]});
      scale[i] = 1.0;
      if (sx > s.smax[r] && s.smax[r] != kNegInf) {
        const double a = std::exp((double)s.smax[r] - (double)sx), a2 = a * a;
        for (int q = 0; q < kSums; ++q) s.sum[q][r] *= kSquared[q] ? a2 : a;
        scale[i] = a, any = true;
      }
      s.smax[r] = sx;
      s.gap[i] = sx - mrow_[r];                     // S - M >= 0
      s.f[i] = (float)std::exp(-(double)s.gap[i]);  // exp(M - S): reference weights on S's scale
    }
    if (any) scale_columns(s.acc.data() + r0, scale, nb, D, B);
  }
}

void TileKernel::reference_weights(const KeyTile& t) {
  const int64_t nb = t.nb, n = t.n, r0 = t.r0;
  // Reference weights e = exp(l - M).
  const float* Lp = L_.data();
  float* X = X_.data();
  float* E = E_.data();
  for (int64_t c = 0; c < n; ++c)
    for (int64_t i = 0; i < nb; ++i) X[c * nb + i] = Lp[c * nb + i] - mrow_[r0 + i];
  exp_floor(X, E, nb * n);
  // Z (and sum e^2) in the same chunked order as the methods' Z_hat: an identical cache gives
  // identical bits.
  for (int64_t c0 = 0; c0 < n; c0 += kChunk) {
    float* fz = part_.data();
    float* fz2 = fz + nb;
    std::fill_n(fz, 2 * nb, 0.0f);
    for (int64_t c = c0; c < std::min(n, c0 + kChunk); ++c)
      for (int64_t i = 0; i < nb; ++i) {
        fz[i] += E[c * nb + i];
        fz2[i] += E[c * nb + i] * E[c * nb + i];
      }
    for (int64_t i = 0; i < nb; ++i) {
      z_[r0 + i] += fz[i];
      z2_[r0 + i] += fz2[i];
    }
  }
}

void TileKernel::outputs(const float* weights, const float* values, const KeyTile& t, int64_t D, double* acc,
                         int64_t B) {
  // Outputs column-major (nb x D) like the accumulators (D x B): contiguous updates.
  Eigen::Map<MatF> Ot(O_.data(), t.nb, D);
  Ot.noalias() =
      Eigen::Map<const MatF>(weights, t.nb, t.n) * Eigen::Map<const RowMatF>(values + t.s0 * D, t.n, D);
  add_columns(O_.data(), t.nb, D, acc + t.r0, B);
}

void TileKernel::method_tile(const TileJob& j, int m, const KeyTile& t, Laps& laps) {
  const int64_t B = j.B, nb = t.nb, n = t.n, r0 = t.r0;
  auto& s = mr_[m];
  const float* dm = Dm_[m].data();
  const float* gap = s.gap.data();
  const float* X = X_.data();
  const float* E = E_.data();
  float* Eh = Eh_.data();
  // e_hat = exp(l_hat - S) = exp((l - M) - delta - (S - M)); the gap is 0 unless the method's
  // logits top the reference's.
  for (int64_t c = 0; c < n; ++c)
    for (int64_t i = 0; i < nb; ++i) Eh[c * nb + i] = X[c * nb + i] - dm[c * nb + i] - gap[i];
  exp_floor(Eh, Eh, nb * n);
  laps.lap(&AttentionTimes::softmax);

  // Float partial sums over chunks of kChunk columns (all-float loops vectorize), added
  // into the fp64 row sums after each chunk.
  float* p = part_.data();
  for (int64_t c0 = 0; c0 < n; c0 += kChunk) {
    std::fill_n(p, kSums * nb, 0.0f);
    for (int64_t c = c0; c < std::min(n, c0 + kChunk); ++c)
      metric_column(E + c * nb, s.f.data(), Eh + c * nb, dm + c * nb, nb, p, p + nb, p + 2 * nb, p + 3 * nb,
                    p + 4 * nb, p + 5 * nb, p + 6 * nb, p + 7 * nb, p + 8 * nb);
    for (int q = 0; q < kSums; ++q) {
      double* __restrict dst = s.sum[q].data() + r0;
      const float* __restrict src = p + q * nb;
      for (int64_t i = 0; i < nb; ++i) dst[i] += src[i];
    }
  }
  laps.lap(&AttentionTimes::metrics);

  outputs(Eh, j.methods[m].v_hat, t, j.D, s.acc.data(), B);
  laps.lap(&AttentionTimes::gemm_pv);

  if (j.topk) update_topk(&top_[(1 + m) * B + r0], L_.data(), dm, tmax_m_[m].data(), nb, n, t.s0);
  laps.lap(&AttentionTimes::topk);
}

void TileKernel::finish(const TileJob& j, TileResult& res, float* out_o) {
  const int64_t B = j.B, D = j.D;
  const int M = j.M;
  // Per row: normalize, compare, sum into the stats of the row's head.
  res.stats.assign(M, std::vector<AttnStats>(j.heads));
  res.ref_sq.assign(j.heads, 0.0);
  for (int64_t r = 0; r < B; ++r) {
    const int64_t h = r % j.heads;
    const double Z = z_[r];
    double* o = o_row_.data();
    for (int64_t d = 0; d < D; ++d) o[d] = acc_[d * B + r];
    double osq = 0;
    for (int64_t d = 0; d < D; ++d) osq += (o[d] / Z) * (o[d] / Z);
    if (out_o)
      for (int64_t d = 0; d < D; ++d) out_o[r * D + d] = (float)(o[d] / Z);
    res.ref_sq[h] += osq;
    const int64_t visible = j.pos[r] + 1;
    for (int m = 0; m < M; ++m) {
      const auto& s = mr_[m];
      const double zs = Z * std::exp((double)mrow_[r] - (double)s.smax[r]);  // Z on S's scale
      const RowErrors e =
          zs > kFarApart && s.sum[Zh][r] > kFarApart
              ? row_errors(s, r, B, zs, z2_[r] / (Z * Z), o, Z, D)
              : exact_row_errors(j, r, m);  // one set of weights vanishes on the other's scale
      AttnStats& st = res.stats[m][h];
      st.score_sq_err += std::max(0.0, e.score_sq);
      st.score_count += visible;
      st.out_sq_err += e.out_sq;
      st.out_sq_ref += osq;
      st.kl_sum += std::max(0.0, e.kl);  // >= 0 exactly; rounding can dip below zero
      if (j.topk)
        st.topk_sum +=
            (double)top_[(1 + m) * B + r].overlap(top_[r]) / (double)std::min<int64_t>(kTopK, visible);
      st.queries += 1;
    }
  }
}

void TileKernel::run(const TileJob& j, TileResult& res, float* out_o, AttentionTimes* times) {
  resize(j);
  reset(j);
  Laps laps(times);
  const int64_t nkeys = j.pos[j.B - 1] + 1;
  // Key tiles in position order: attention sinks (the first tokens) then set the running maxima
  // early (measured on the synthetic llama3-8b dump: 5.5x fewer rescales than last-to-first).
  KeyTile t;  // rows before t.r0 see none of the tile's keys (positions are non-decreasing)
  for (t.s0 = 0; t.s0 < nkeys; t.s0 += j.key_tile) {
    t.n = std::min(j.key_tile, nkeys - t.s0);
    while (j.pos[t.r0] < t.s0) ++t.r0;
    t.nb = j.B - t.r0;
    logits(j, t);
    laps.lap(&AttentionTimes::gemm_qk);
    mask_and_rescale(j, t);
    reference_weights(t);
    laps.lap(&AttentionTimes::softmax);
    outputs(E_.data(), j.v, t, j.D, acc_.data(), j.B);
    laps.lap(&AttentionTimes::gemm_pv);
    if (j.topk) update_topk(&top_[t.r0], L_.data(), nullptr, tmax_.data(), t.nb, t.n, t.s0);
    laps.lap(&AttentionTimes::topk);
    for (int m = 0; m < j.M; ++m) method_tile(j, m, t, laps);
  }
  finish(j, res, out_o);
  laps.lap(&AttentionTimes::metrics);
}

}  // namespace kvlab::detail
