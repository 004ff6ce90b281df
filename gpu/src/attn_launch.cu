// Picks the split kernel of a cache kind and combines the splits (flash decoding's reduction).
#include <cstdint>

#include "attn_kinds.h"
#include "attn_types.h"

namespace kvlab::gpu::attn {

namespace {

// out[b, hq] = sum_s 2^(m_s - M) o_s / sum_s 2^(m_s - M) l_s, M = max_s m_s (empty splits: m = -inf).
__global__ void combine_splits(const float* part_o, const float* part_ml, float* out, int splits, int D) {
  const int64_t row = blockIdx.x;
  const float* ml = part_ml + row * splits * 2;
  float M = -__builtin_huge_valf();
  for (int s = 0; s < splits; ++s) M = fmaxf(M, ml[2 * s]);
  for (int c = threadIdx.x; c < D; c += blockDim.x) {
    float num = 0.0f, den = 0.0f;
    for (int s = 0; s < splits; ++s) {
      const float w = exp2f(__fsub_rn(ml[2 * s], M));
      num = __fmaf_rn(w, part_o[(row * splits + s) * D + c], num);
      den = __fmaf_rn(w, ml[2 * s + 1], den);
    }
    out[row * D + c] = __fdiv_rn(num, den);
  }
}

}  // namespace

const char* launch_decode(const AttnKind& k, int D, int group, int B, const AttnArgs& a, float* out,
                          cudaStream_t s) {
  bool ok = false;
  if (k.kbits == 0 && k.vbits == 0)
    ok = launch_fp16(D, group, a, B, s);
  else if (k.kbits == 8 && !k.kboost && k.vbits == 8 && k.vchannel)
    ok = launch_int8(D, group, a, B, s);
  else if (k.kbits == 4 && !k.kboost && k.vbits == 4 && !k.vchannel)
    ok = launch_kivi4(D, group, a, B, s);
  else if (k.kbits == 2 && !k.kboost && k.vbits == 2 && !k.vchannel)
    ok = launch_kivi2(D, group, a, B, s);
  else if (k.kbits == 2 && k.kboost && k.vbits == 2 && !k.vchannel)
    ok = launch_kitty2(D, group, a, B, s);
  else
    return "no decode kernel for this pair of key and value formats";
  if (!ok)
    return "no decode kernel for this head_dim and query heads per KV head (built: D=128 with 1 or 4, D=64 "
           "with 4)";
  combine_splits<<<B * a.Hkv * group, 128, 0, s>>>(a.part_o, a.part_ml, out, a.splits, D);
  return "";
}

const char* launch_stream(const AttnKind& k, int B, const AttnArgs& a, float* out, cudaStream_t s) {
  if (!launch_stream_kernel(k, B, a, s)) return "no streaming decode kernel for this pair of formats";
  combine_splits<<<B * a.Hkv * 4, 128, 0, s>>>(a.part_o, a.part_ml, out, a.splits, 128);
  return "";
}

const char* launch_vq(int group, int B, const AttnArgs& a, float* out, cudaStream_t s) {
  if (!launch_vq_kernel(group, a, B, s))
    return "no codebook decode kernel for this many query heads per KV head (built: 1, 4)";
  combine_splits<<<B * a.Hkv * group, 128, 0, s>>>(a.part_o, a.part_ml, out, a.splits, 128);
  return "";
}

}  // namespace kvlab::gpu::attn
