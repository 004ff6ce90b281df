// Streaming top-k of one row of logits: the k largest values seen so far and their positions,
// under a total order (larger value first, then earlier position), so the result does not
// depend on the order in which keys arrive and the reference and a method that leaves a row
// unchanged select the same positions.
#pragma once
#include <cstdint>
#include <limits>

#include "kvlab/metrics.h"

namespace kvlab::detail {

struct TopK {
  float val[kTopK];
  int64_t idx[kTopK];
  int count = 0;

  // Values below this cannot enter; equal values enter only with an earlier position.
  float threshold() const { return count < kTopK ? -std::numeric_limits<float>::infinity() : val[kTopK - 1]; }

  static bool before(float v, int64_t i, float w, int64_t j) { return v > w || (v == w && i < j); }

  // v = -inf marks a masked (not visible) key.
  void push(float v, int64_t i) {
    if (!(v > -std::numeric_limits<float>::infinity())) return;
    if (count == kTopK && !before(v, i, val[kTopK - 1], idx[kTopK - 1])) return;
    int j = count < kTopK ? count++ : kTopK - 1;
    while (j > 0 && before(v, i, val[j - 1], idx[j - 1])) {
      val[j] = val[j - 1];
      idx[j] = idx[j - 1];
      --j;
    }
    val[j] = v;
    idx[j] = i;
  }

  // Shared positions of two top-k sets over the same row.
  int overlap(const TopK& o) const {
    int n = 0;
    for (int a = 0; a < count; ++a)
      for (int b = 0; b < o.count; ++b) n += idx[a] == o.idx[b];
    return n;
  }
};

}  // namespace kvlab::detail
