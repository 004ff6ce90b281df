// The streaming decode kernels (attn_stream.cuh) of fp16, int8 and kivi-2/4 caches, with and without the
// debug path that writes every K_hat / V_hat.
#include "attn_kinds.h"
#include "attn_stream.cuh"

namespace kvlab::gpu::attn {

namespace {

template <int KB, bool DBG>
void* stream_kernel() {
  static bool ready = false;  // raise the dynamic shared memory limit once per kernel
  if (!ready) {
    cudaFuncSetAttribute(decode_stream<KB, DBG>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                         StreamGeo<KB>::SMEM);
    ready = true;
  }
  return reinterpret_cast<void*>(decode_stream<KB, DBG>);
}

template <int KB>
bool launch_kb(const AttnArgs& a, int B, cudaStream_t s) {
  const dim3 grid(a.splits, a.Hkv, B);
  stream_kernel<KB, false>();
  stream_kernel<KB, true>();
  if (a.dbg_k)
    decode_stream<KB, true><<<grid, kStreamWarps * 32, StreamGeo<KB>::SMEM, s>>>(a);
  else
    decode_stream<KB, false><<<grid, kStreamWarps * 32, StreamGeo<KB>::SMEM, s>>>(a);
  return true;
}

template <int KB>
int blocks_kb() {
  int n = 0;
  stream_kernel<KB, false>();
  cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, decode_stream<KB, false>, kStreamWarps * 32,
                                                StreamGeo<KB>::SMEM);
  return n;
}

// Key code width of the streaming kernel serving a kind; -1: none.
int stream_kb(const AttnKind& k) {
  if (k.kbits == 0 && k.vbits == 0) return 0;
  if (!k.kboost && !k.vchannel && k.kbits == k.vbits && (k.kbits == 2 || k.kbits == 4)) return k.kbits;
  if (!k.kboost && k.vchannel && k.kbits == 8 && k.vbits == 8) return 8;
  return -1;
}

}  // namespace

bool launch_stream_kernel(const AttnKind& k, int B, const AttnArgs& a, cudaStream_t s) {
  switch (stream_kb(k)) {
    case 0: return launch_kb<0>(a, B, s);
    case 2: return launch_kb<2>(a, B, s);
    case 4: return launch_kb<4>(a, B, s);
    case 8: return launch_kb<8>(a, B, s);
    default: return false;
  }
}

int stream_blocks_per_sm(const AttnKind& k) {
  switch (stream_kb(k)) {
    case 0: return blocks_kb<0>();
    case 2: return blocks_kb<2>();
    case 4: return blocks_kb<4>();
    case 8: return blocks_kb<8>();
    default: return 0;
  }
}

}  // namespace kvlab::gpu::attn
