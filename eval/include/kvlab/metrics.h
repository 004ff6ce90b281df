// Error metrics of a quantized KV cache: sums that merge (per head -> layer -> dump) and the
// figures derived from them. Aggregation rules are docs/EVAL_JSON.md.
#pragma once
#include <cstdint>

namespace kvlab {

// Reconstruction error of K or V over the quantized positions of one (layer, KV head).
struct ReconStats {
  double sq_err = 0;   // sum of (x - x_hat)^2
  double max_abs = 0;  // max |x - x_hat|
  int64_t count = 0;   // quantized elements (tokens x D); 0 when nothing is quantized (fp16)

  void merge(const ReconStats& o);
  double mse() const;  // sq_err / count; 0 when count == 0
};

// Attention error of one method against the reference, summed over queries.
struct AttnStats {
  double score_sq_err = 0;  // sum over valid causal entries of (P - P_hat)^2
  int64_t score_count = 0;  // valid causal entries: sum over queries of (t + 1)
  double out_sq_err = 0;    // sum over queries of ||O - O_hat||^2
  double out_sq_ref = 0;    // sum over queries of ||O||^2
  double kl_sum = 0;        // sum over queries of KL(P || P_hat)
  double topk_sum = 0;      // sum over queries of |top8(P) & top8(P_hat)| / min(8, t + 1)
  int64_t queries = 0;

  void merge(const AttnStats& o);
  double score_mse() const;     // score_sq_err / score_count
  double out_rel_err() const;   // sqrt(out_sq_err / out_sq_ref); 0 if both are 0, NaN if only ||O|| is
  double kl() const;            // kl_sum / queries
  double topk_overlap() const;  // topk_sum / queries
};

constexpr int kTopK = 8;  // the attended positions compared by topk_overlap

}  // namespace kvlab
