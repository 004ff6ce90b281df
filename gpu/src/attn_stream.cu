// The streaming decode kernels (attn_stream.cuh) of fp16, int8, kivi-2/4 and Kitty (2-bit) caches,
// with and without the debug path that writes every K_hat / V_hat.
#include "attn_kinds.h"
#include "attn_stream.cuh"

namespace kvlab::gpu::attn {

namespace {

template <int KB, bool DBG, bool BO>
void* stream_kernel() {
  static bool ready = false;  // raise the dynamic shared memory limit once per kernel
  if (!ready) {
    cudaFuncSetAttribute(decode_stream<KB, DBG, BO>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                         StreamGeo<KB, BO>::SMEM);
    ready = true;
  }
  return reinterpret_cast<void*>(decode_stream<KB, DBG, BO>);
}

template <int KB, bool BO>
bool launch_kb(const AttnArgs& a, int B, cudaStream_t s) {
  const dim3 grid(a.splits, a.Hkv, B);
  constexpr int smem = StreamGeo<KB, BO>::SMEM;
  stream_kernel<KB, false, BO>();
  stream_kernel<KB, true, BO>();
  if (a.dbg_k)
    decode_stream<KB, true, BO><<<grid, kStreamWarps * 32, smem, s>>>(a);
  else
    decode_stream<KB, false, BO><<<grid, kStreamWarps * 32, smem, s>>>(a);
  return true;
}

template <int KB, bool BO>
int blocks_kb() {
  int n = 0;
  stream_kernel<KB, false, BO>();
  cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, decode_stream<KB, false, BO>, kStreamWarps * 32,
                                                StreamGeo<KB, BO>::SMEM);
  return n;
}

// The streaming kernel serving a kind: key code width, plus 100 for Kitty key pages; -1: none.
int stream_kb(const AttnKind& k) {
  if (k.kbits == 0 && k.vbits == 0) return 0;
  if (!k.vchannel && k.kbits == k.vbits && (k.kbits == 2 || k.kbits == 4))
    return k.kboost ? (k.kbits == 2 ? 102 : -1) : k.kbits;
  if (!k.kboost && k.vchannel && k.kbits == 8 && k.vbits == 8) return 8;
  return -1;
}

}  // namespace

bool launch_stream_kernel(const AttnKind& k, int B, const AttnArgs& a, cudaStream_t s) {
  switch (stream_kb(k)) {
    case 0: return launch_kb<0, false>(a, B, s);
    case 2: return launch_kb<2, false>(a, B, s);
    case 4: return launch_kb<4, false>(a, B, s);
    case 8: launch_stream_int8(a, B, s); return true;
    case 102: return launch_kb<2, true>(a, B, s);
    default: return false;
  }
}

int stream_blocks_per_sm(const AttnKind& k) {
  switch (stream_kb(k)) {
    case 0: return blocks_kb<0, false>();
    case 2: return blocks_kb<2, false>();
    case 4: return blocks_kb<4, false>();
    case 8: return stream_int8_blocks_per_sm();
    case 102: return blocks_kb<2, true>();
    default: return 0;
  }
}

}  // namespace kvlab::gpu::attn
