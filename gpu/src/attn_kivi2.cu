// Decode-attention kernels for the kivi2 cache (attn_kernel.cuh).
#include "attn_kernel.cuh"
#include "attn_kinds.h"

namespace kvlab::gpu::attn {
bool launch_kivi2(int D, int group, const AttnArgs& a, int B, cudaStream_t s) {
  return launch_kind<2, false, 2, false>(D, group, a, B, s);
}
}  // namespace kvlab::gpu::attn
