// One launcher per cache kind, each in its own .cu file so the kernels compile in parallel.
// Each returns false when no kernel was built for (D, heads per group).
#pragma once
#include "attn_types.h"

namespace kvlab::gpu::attn {
bool launch_fp16(int D, int group, const AttnArgs& a, int B, cudaStream_t s);
bool launch_int8(int D, int group, const AttnArgs& a, int B, cudaStream_t s);  // channel-major K and V
bool launch_kivi4(int D, int group, const AttnArgs& a, int B,
                  cudaStream_t s);  // 4-bit K per channel, V per token
bool launch_kivi2(int D, int group, const AttnArgs& a, int B, cudaStream_t s);
bool launch_kitty2(int D, int group, const AttnArgs& a, int B,
                   cudaStream_t s);  // Kitty 2-bit key pages, 2-bit V
// The streaming kernel (D 128, 4 heads per group) of a kind; false when it has none.
bool launch_stream_kernel(const AttnKind& k, int B, const AttnArgs& a, cudaStream_t s);
// int8 (group=all) on its own streaming kernel (attn_stream_int8.cu), and its blocks per SM.
void launch_stream_int8(const AttnArgs& a, int B, cudaStream_t s);
int stream_int8_blocks_per_sm();
// The codebook kernel (attn_vq.cu, D 128) for 1 or 4 query heads per KV head; false otherwise.
bool launch_vq_kernel(int group, const AttnArgs& a, int B, cudaStream_t s);
}  // namespace kvlab::gpu::attn
