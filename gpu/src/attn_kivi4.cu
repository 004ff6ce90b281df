// Decode-attention kernels for the kivi4 cache (attn_kernel.cuh).
#include "attn_kernel.cuh"
#include "attn_kinds.h"

namespace kvlab::gpu::attn {
bool launch_kivi4(int D, int group, const AttnArgs& a, int B, cudaStream_t s) {
  return launch_kind<4, false, 4, false>(D, group, a, B, s);
}
}  // namespace kvlab::gpu::attn
