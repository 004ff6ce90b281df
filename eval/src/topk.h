// Streaming top-k of one row of logits: the k largest values seen so far and their positions.
// Ties keep the earlier position (keys arrive in increasing position order and a value must
// beat the current k-th to enter), so the reference and a method that leaves a row unchanged
// select the same positions.
#pragma once
#include <cstdint>
#include <limits>

#include "kvlab/metrics.h"

namespace kvlab::detail {

struct TopK {
  float val[kTopK];
  int64_t idx[kTopK];
  int count = 0;

  // The value a new entry must exceed.
  float threshold() const { return count < kTopK ? -std::numeric_limits<float>::infinity() : val[kTopK - 1]; }

  void push(float v, int64_t i) {
    if (!(v > threshold())) return;
    int j = count < kTopK ? count++ : kTopK - 1;
    while (j > 0 && v > val[j - 1]) {  // keep descending order; equal values stay in arrival order
      val[j] = val[j - 1], idx[j] = idx[j - 1];
      --j;
    }
    val[j] = v, idx[j] = i;
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
