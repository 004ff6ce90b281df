// Decode-attention kernels for the fp16 cache (attn_kernel.cuh).
#include "attn_kernel.cuh"
#include "attn_kinds.h"

namespace kvlab::gpu::attn {
bool launch_fp16(int D, int group, const AttnArgs& a, int B, cudaStream_t s) {
  return launch_kind<0, false, 0, false>(D, group, a, B, s);
}
}  // namespace kvlab::gpu::attn
