// Decode-attention kernels for the int8 cache (attn_kernel.cuh).
#include "attn_kernel.cuh"
#include "attn_kinds.h"

namespace kvlab::gpu::attn {
bool launch_int8(int D, int group, const AttnArgs& a, int B, cudaStream_t s) {
  return launch_kind<8, false, 8, true>(D, group, a, B, s);
}
}  // namespace kvlab::gpu::attn
