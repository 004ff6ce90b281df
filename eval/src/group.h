// All query tiles of the query heads that share one KV head, in parallel (OpenMP tasks over
// query tiles, each with every head of the group stacked), reduced in a fixed order so results
// do not depend on the thread count.
#pragma once
#include <cstdint>
#include <vector>

#include "attend.h"
#include "kvlab/attention.h"
#include "kvlab/attention_unit.h"

namespace kvlab::detail {

// The public unit of work (kvlab/attention_unit.h) under the kernel's names.
using GroupJob = AttentionUnit;
using GroupResult = AttentionUnitResult;

// out_o: optional (heads, N, D) reference outputs. times: optional CPU seconds by part.
void run_group(const GroupJob& job, GroupResult& result, float* out_o, AttentionTimes* times);

// dst (N, D) = src rows pos[i] of a (T, D) head, times 1/sqrt(D) (in fp32). dst may equal src
// (rows move down only, positions ascend).
void gather_scaled(const float* src, const std::vector<int64_t>& pos, int64_t D, float* dst);

}  // namespace kvlab::detail
