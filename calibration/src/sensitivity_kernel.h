// The inner loops of channel sensitivity for one query head and a tile of its queries.
//
// Fast path (rank 1): with P the reference softmax of query t and d_j = a (k_hat[j][c] - k[j][c]),
// a = q[t][c] / sqrt(D), the perturbed scores are P'_j = P_j e^{d_j} / r, r = sum_j P_j e^{d_j}
// = 1 + A, A = sum_j P_j expm1(d_j). So
//   sum_j (P_j - P'_j)^2 = sum_j P_j^2 (A - expm1(d_j))^2 / r^2
//                        = (C - 2 A B + A^2 S0) / r^2,
// B = sum_j P_j^2 expm1(d_j), C = sum_j P_j^2 expm1(d_j)^2, S0 = sum_j P_j^2: one pass over the
// quantized keys per channel, in double, with expm1 (not exp - 1) so small d keep their digits.
// Keys outside the quantized range have d_j = 0 and enter through S0 only.
#pragma once
#include <cstdint>

namespace kvlab::detail {

struct HeadTask {
  const float* q = nullptr;              // (T, D) the query head
  const double* k = nullptr;             // (T, D) its KV head's keys
  const double* delta = nullptr;         // (D, n) k_hat - k over keys [kb, kb + n), channel-major
  const double* delta_absmax = nullptr;  // (D) max |delta| per channel
  int64_t T = 0, D = 0, kb = 0, n = 0;
  const int64_t* positions = nullptr;  // the tile's query positions, ascending
  int64_t count = 0;
};

// Adds each channel's sum over the tile's queries and keys j <= t of (P - P_c)^2 to sq_err[c].
void tile_sensitivity_fast(const HeadTask& t, double* sq_err);
void tile_sensitivity_naive(const HeadTask& t, double* sq_err);

// The fast path from sums a device computed: abc (count, D, 3) holds A, B, C of each query and
// channel, s0 (count) S0 of each query. The same finish as tile_sensitivity_fast, its fallbacks
// (shifts beyond 300, cancellation) recomputed here from the query's logits.
void tile_sensitivity_from_sums(const HeadTask& t, const double* abc, const double* s0, double* sq_err);

}  // namespace kvlab::detail
