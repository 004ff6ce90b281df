// Decode-attention kernels for the kitty2 cache (attn_kernel.cuh).
#include "attn_kernel.cuh"
#include "attn_kinds.h"

namespace kvlab::gpu::attn {
bool launch_kitty2(int D, int group, const AttnArgs& a, int B, cudaStream_t s) {
  return launch_kind<2, true, 2, false>(D, group, a, B, s);
}
}  // namespace kvlab::gpu::attn
