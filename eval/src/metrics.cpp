#include "kvlab/metrics.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace kvlab {

void ReconStats::merge(const ReconStats& o) {
  sq_err += o.sq_err;
  max_abs = std::max(max_abs, o.max_abs);
  count += o.count;
}

double ReconStats::mse() const { return count ? sq_err / (double)count : 0.0; }

void AttnStats::merge(const AttnStats& o) {
  score_sq_err += o.score_sq_err;
  score_count += o.score_count;
  out_sq_err += o.out_sq_err;
  out_sq_ref += o.out_sq_ref;
  kl_sum += o.kl_sum;
  topk_sum += o.topk_sum;
  queries += o.queries;
}

double AttnStats::score_mse() const { return score_count ? score_sq_err / (double)score_count : 0.0; }

double AttnStats::out_rel_err() const {
  if (out_sq_ref > 0) return std::sqrt(out_sq_err / out_sq_ref);
  return out_sq_err == 0 ? 0.0 : std::numeric_limits<double>::quiet_NaN();
}

double AttnStats::kl() const { return queries ? kl_sum / (double)queries : 0.0; }

double AttnStats::topk_overlap() const { return queries ? topk_sum / (double)queries : 0.0; }

}  // namespace kvlab
