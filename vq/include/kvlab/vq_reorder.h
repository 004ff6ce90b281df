// Frequency reordering of VQ codebooks (VQ-LLM's codebook cache): count how often each entry is
// used, sort the entries by frequency (descending, ties by old index), remap the codes. Decoding
// is unchanged bit for bit: the same entries are summed in the same order, only renamed. A
// kernel then keeps entries [0, n_reg) in registers, [n_reg, n_reg + n_shared) in shared memory
// and the rest in global memory.
#pragma once
#include <cstdint>
#include <vector>

#include "kvlab/vq.h"

namespace kvlab {

// Uses of each entry: [stage][group][entry], over T tokens' codes ([T][stages][groups]).
std::vector<int64_t> vq_usage(const VQCodebooks& cb, const uint8_t* codes, int64_t T);

// Sorts each codebook's entries by `usage` (descending) in place, permutes `usage` to match and
// remaps `codes` (T tokens; may be null). Returns old_of_new: [stage][group][new entry] -> old.
std::vector<uint8_t> vq_reorder(VQCodebooks& cb, std::vector<int64_t>& usage, uint8_t* codes, int64_t T);

// How one frequency-sorted codebook fills a register / shared-memory / global hierarchy.
struct CacheLevels {
  int64_t entries = 0, hot = 0;     // hot: used more than mean + 3 sigma of the counts
  std::vector<double> coverage;     // coverage[i]: share of lookups served by entries 0..i
  int64_t n_reg = 0, n_shared = 0;  // entries in registers; in shared memory after them
  double share_reg = 0, share_shared = 0, share_global = 0;  // shares of lookups per level
};
// counts: one codebook's usage, already sorted descending; entry_bytes: one entry's size
// (vec x 2 for fp16 entries); budgets per codebook, in bytes.
CacheLevels cache_levels(const int64_t* counts, int64_t entries, int64_t entry_bytes, int64_t reg_bytes,
                         int64_t smem_bytes);

}  // namespace kvlab
