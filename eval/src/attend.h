// The tiled attention kernel: one tile of queries of one query head against the reference keys
// and values of its KV head and against every method's cache, in one sweep over key tiles.
//
// No score matrix larger than query_tile x key_tile exists. The reference keeps its running row
// maximum M; each method keeps a running scale S = max(M, its own largest logit), so its weights
// e_hat = exp(l_hat - S) <= 1 and the reference weights on the same scale, e' = e exp(M - S),
// combine with them in per-row sums that need no final normalizer (both are rescaled whenever
// M or S grows):
//   Z = sum e, Z_hat = sum e_hat, Zd = sum d, A = sum d^2, B = sum d e_hat, C = sum e_hat^2,
//   W = sum w, with delta = l - l_hat = q . (k - k_hat), d = e' - e_hat = e' (1 - exp(-delta)),
//   w = e' delta - d = e' (delta - 1 + exp(-delta)).
// For |delta| <= 1/8, d and w come from Taylor series of 1 - exp(-delta) and
// delta - 1 + exp(-delta), so they keep full relative precision when the method is close to the
// reference (fp16, int8); otherwise d = e' - e_hat. Per row at the end, with Zs = Z exp(M - S):
//   sum (P - P_hat)^2 = (A + 2 c B + c^2 C) / Zs^2 with c = -Zd / Z_hat
//   KL(P || P_hat)    = W / Zs + x + log1p(-x) with x = Zd / Zs (log(Z_hat / Zs) for |x| >= 1/2)
// Rows where Zs or Z_hat falls below 1e-20 (the distributions ~46 nats apart) are recomputed
// exactly in fp64. Sums are fp64; logits, weights and the GEMMs are fp32.
#pragma once
#include <cstdint>
#include <vector>

#include "aligned.h"
#include "kvlab/attention.h"
#include "kvlab/attention_unit.h"
#include "kvlab/metrics.h"
#include "topk.h"

namespace kvlab::detail {

// What one task needs: B scaled query rows (q / sqrt(D)) with non-decreasing positions, the
// reference K, V of the KV head (T, D) and the methods' caches. The query heads that share the
// KV head are stacked (row r belongs to head r % heads), so each key tile is packed for the
// GEMMs once for all of them.
struct TileJob {
  const float* q = nullptr;      // (B, D)
  const int64_t* pos = nullptr;  // B positions, non-decreasing
  int64_t B = 0, D = 0, heads = 1;
  const float* k = nullptr;
  const float* v = nullptr;
  const MethodKV* methods = nullptr;
  int M = 0;
  int64_t key_tile = 256;
  bool topk = true;  // false: no top-8 (topk_sum stays 0)
};

// Per task results, summed over the rows of each head.
struct TileResult {
  std::vector<std::vector<AttnStats>> stats;  // [method][head], out_sq_ref included
  std::vector<double> ref_sq;                 // [head]: sum over the rows of ||O||^2
};

// The per-row sums of a method (attend.h's header comment), on its scale S. Each is rescaled by
// exp(S_old - S_new) when S grows, or by its square for the sums of products of two weights.
enum MethodSum {
  Zh,  // sum e_hat
  Zd,  // sum d
  A,   // sum d^2
  Bd,  // sum d e_hat
  C,   // sum e_hat^2
  W,   // sum w
  X2,  // sum e' e_hat (the cross term of sum (P - P_hat)^2 written out)
  K,   // sum e' delta (E_P[delta] times Zs)
  Ka,  // sum e' |delta| (bounds K's rounding)
  kSums
};
constexpr bool kSquared[kSums] = {false, false, true, true, true, false, true, false, false};

struct MethodRows {
  std::vector<float> smax, gap, f;  // running scale S; per tile S - M and exp(M - S)
  std::vector<double> sum[kSums];   // per row
  std::vector<double> acc;          // output accumulator (D x B, column-major) on S's scale
};

// One row's errors against one method.
struct RowErrors {
  double score_sq = 0;  // sum over the row's keys of (P - P_hat)^2
  double kl = 0;        // KL(P || P_hat)
  double out_sq = 0;    // ||O - O_hat||^2
};
// Row r of the job against method m, directly in fp64 over keys 0..pos[r]: for rows whose two
// distributions are too far apart for the shared-scale sums (exact_row.cpp).
RowErrors exact_row_errors(const TileJob& job, int64_t r, int m);

class Laps;  // attend.cpp: CPU-time laps into AttentionTimes

// One key tile of a job: keys s0..s0+n-1, seen by rows r0..B-1 (nb of them).
struct KeyTile {
  int64_t s0 = 0, n = 0, r0 = 0, nb = 0;
};

// Buffers reused between tiles by one thread.
class TileKernel {
 public:
  // out_o: optional (B, D) reference outputs.
  void run(const TileJob& job, TileResult& result, float* out_o, AttentionTimes* times);

 private:
  void resize(const TileJob& job);
  // The phases of run, in order. Per job:
  void reset(const TileJob& job);  // running maxima, sums, accumulators and top-k emptied
  // Per key tile: the fp32 GEMMs (reference logits L, each method's differences delta) ...
  void logits(const TileJob& job, const KeyTile& t);
  // ... the causal mask, the reference's running max M and each method's scale S, rescaling
  // what was summed under the old ones ...
  void mask_and_rescale(const TileJob& job, const KeyTile& t);
  // ... the reference weights e = exp(l - M) and their sums Z, sum e^2 ...
  void reference_weights(const KeyTile& t);
  // ... acc (D x B, from row t.r0) += weights (nb x n) times the tile's values (T, D) ...
  void outputs(const float* weights, const float* values, const KeyTile& t, int64_t D, double* acc,
               int64_t B);
  // ... and for each method its weights, metric sums, outputs and top-k.
  void method_tile(const TileJob& job, int m, const KeyTile& t, Laps& laps);
  // Per job, last: each row normalized and compared, summed into its head's stats.
  void finish(const TileJob& job, TileResult& result, float* out_o);
  // Push the tile's values L - delta (or L when delta is null; col-major nb x n, keys from s0)
  // into the rows' top-k; tmax: each row's largest value in the tile.
  void update_topk(TopK* top, const float* L, const float* delta, const float* tmax, int64_t nb, int64_t n,
                   int64_t s0);
  AlignedVector<float> L_, X_, E_, Eh_, O_;  // tiles (B x key_tile, col-major) and (B x D)
  std::vector<float> part_;                  // fp32 partial row sums (kSums x B)
  std::vector<AlignedVector<float>> Dm_;     // per method: delta tile
  std::vector<float> mrow_, tmax_;           // the reference's running max M, its tile max
  std::vector<std::vector<float>> tmax_m_;   // tile max of each method's logits
  std::vector<double> z_, z2_, acc_;         // reference: Z, sum e^2, output accumulator (D x B)
  std::vector<double> scale_;                // per row of a tile: its accumulator's rescale factor
  std::vector<double> o_row_;                // one row of acc_ (D)
  std::vector<MethodRows> mr_;
  std::vector<TopK> top_;         // (1 + M) x B
  std::vector<float> thr_, col_;  // top-k thresholds and one column of logits (B)
  std::vector<uint8_t> flag_;     // rows of that column that may enter their top-k
};

}  // namespace kvlab::detail
