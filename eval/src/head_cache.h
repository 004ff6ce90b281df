// One method's cache of one KV head, prepared for the attention kernel: the reconstruction
// errors, whether it equals the reference, and K - K_hat in place of K_hat.
#pragma once
#include <cstdint>
#include <vector>

#include "kvlab/method.h"
#include "kvlab/metrics.h"

namespace kvlab::detail {

struct HeadCache {
  Reconstruction r;        // after finish_head_cache: r.k holds K - K_hat, r.v holds V_hat
  bool identical = false;  // K_hat == K and V_hat == V everywhere (then r is released)
  ReconStats key, value;   // over the schedule's quantized positions
};

// k, v: the reference (T, D); c.r: the method's K_hat, V_hat of the same shape.
void finish_head_cache(const float* k, const float* v, int64_t T, int64_t D, const Schedule& s, HeadCache& c);

// fp16 copies of one KV head's K and V (n values each), `exact` when every value is an fp16
// value. The methods' apply then reads fp16 views: the same values, without rounding each element
// to fp16 again for every method.
struct HalfCopies {
  std::vector<_Float16> k, v;
  bool exact = false;
};
HalfCopies half_copies(const float* k, const float* v, int64_t n);

}  // namespace kvlab::detail
