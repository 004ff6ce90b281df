// All query tiles of the query heads that share one KV head, in parallel (OpenMP tasks over
// query tiles, each with every head of the group stacked), reduced in a fixed order so results
// do not depend on the thread count.
#pragma once
#include <cstdint>
#include <vector>

#include "attend.h"
#include "kvlab/attention.h"

namespace kvlab::detail {

struct GroupJob {
  const float* q = nullptr;  // (heads, N, D) selected queries, scaled by 1/sqrt(D)
  int64_t heads = 0, N = 0, D = 0;
  const int64_t* pos = nullptr;  // N positions, ascending
  const float* k = nullptr;      // reference K, V of the KV head, (T, D)
  const float* v = nullptr;
  std::vector<MethodKV> methods;
  AttentionTiles tiles;
};

struct GroupResult {
  std::vector<std::vector<AttnStats>> stats;  // [method][head]
  std::vector<double> ref_sq;                 // per head: sum over queries of ||O||^2
};

// out_o: optional (heads, N, D) reference outputs. times: optional CPU seconds by part.
void run_group(const GroupJob& job, GroupResult& result, float* out_o, AttentionTimes* times);

// dst (N, D) = src rows pos[i] of a (T, D) head, times 1/sqrt(D) (in fp32). dst may equal src
// (rows move down only, positions ascend).
void gather_scaled(const float* src, const std::vector<int64_t>& pos, int64_t D, float* dst);

}  // namespace kvlab::detail
