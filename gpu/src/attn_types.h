// The decode-attention cache as the kernels read it (C++17: the .cu files and the host code share
// it). One sequence of L tokens holds, per KV head: the first S tokens (sink) in fp16, the packed
// key tokens [S, S + k.f.T) and value tokens [S, S + v.f.T) exactly as core's quantize writes
// them (PackedLayout, N = KV heads), and the remaining tokens of each role in fp16 (the residual
// window). docs/FORMATS.md section 9 draws it.
#pragma once
#include <cstdint>

#include <cuda_runtime.h>

#include "kvlab/hd.h"
#include "kvlab/layout.h"

namespace kvlab::gpu::attn {

// One role's packed tokens of one sequence: core's layout and device pointers.
struct AttnPart {
  PackedLayout f;  // N = KV heads; f.T = packed tokens (0: none)
  const uint8_t* codes = nullptr;
  const void* scale = nullptr;  // fp16 bits or fp32 (f.half_params)
  const void* zero = nullptr;   // null when sym
  const uint8_t* high = nullptr;
  const uint8_t* index = nullptr;
};

struct AttnSeq {
  int32_t L = 0;  // tokens in the cache
  int32_t S = 0;  // sink tokens: min(sink, L), fp16 in both roles
  AttnPart k, v;
  // fp16 (KV heads, L - part.f.T, D): rows [0, S) are the sink, row S + i the i-th token after
  // the packed range.
  const uint16_t* k_fp = nullptr;
  const uint16_t* v_fp = nullptr;
  int64_t dbg = 0;  // first element of this sequence's (KV heads, L, D) block in the debug dumps
};

// A codebook (VQ / CQ) cache: every token of both roles as one row of row_bytes per (KV head,
// token), the codes [stage][group] LSB-first at `bits` bits (vq_pack's rows), in AttnPart::codes
// with f.T = L; one set of fp32 codebooks per KV head and role, shared by the batch
// (docs/FORMATS.md section 9.5).
struct AttnVq {
  int vec = 0, bits = 0, stages = 0, row_bytes = 0;
  int n_smem = 0;                  // entries [0, n_smem) of every codebook are staged in shared memory
  const float* k_books = nullptr;  // (KV heads, stages, D / vec, 2^bits, vec)
  const float* v_books = nullptr;
};

struct AttnArgs {
  const AttnSeq* seqs = nullptr;  // device array of B
  const float* q = nullptr;       // (B, Hq, D) fp32
  float* part_o = nullptr;        // (B, Hq, splits, D): unnormalized outputs of each split
  float* part_ml = nullptr;       // (B, Hq, splits, 2): running max (log2 units) and sum
  int Hkv = 0, splits = 1;
  float scale_log2 = 0;  // log2(e) / sqrt(D)
  // Debug path (null: off): every K_hat / V_hat value the kernel computes, fp32, per sequence
  // at seq.dbg, as (KV heads, L, D).
  float* dbg_k = nullptr;
  float* dbg_v = nullptr;
  AttnVq vq;  // codebook caches only
};

// Which kernel: key and value code widths (0: fp16 cache), Kitty key pages, channel-major values.
struct AttnKind {
  int kbits = 0;
  bool kboost = false;
  int vbits = 0;
  bool vchannel = false;
  bool vq = false;  // codebook cache (AttnArgs::vq); the other fields unused
};

constexpr int kAttnThreads = 128;
// Tokens per tile: one 32-bit word of key codes per thread (256 for fp16 keys).
KV_HD constexpr int attn_tile_tokens(int kbits) { return kbits ? kAttnThreads * (32 / kbits) : 256; }

// Launch the split kernel (grid: splits x Hkv x B) then the combine kernel into out (B, Hq, D).
// Returns an empty string, or why no kernel serves (kind, D, heads per group).
const char* launch_decode(const AttnKind& kind, int D, int group, int B, const AttnArgs& a, float* out,
                          cudaStream_t s);

// The streaming kernel (attn_stream.cuh): D = 128, 4 query heads per KV head, kStreamWarps
// independent warps per block, each over its own tiles of stream_tile_tokens tokens (kivi: a
// 16-byte key row; int8: 32 tokens, two MMA blocks).
constexpr int kStreamWarps = 4;
constexpr int kStreamMaxSlots = 32;  // Kitty: boosted key channels per page the streaming kernel stages
constexpr int kRestTokens = 8;       // tokens of one rest chunk (sink, partial tile, residual): 4 lanes each
KV_HD constexpr int stream_tile_tokens(int kbits) { return kbits == 8 ? 32 : kbits ? 128 / kbits : 32; }
// Consecutive tiles a warp takes in turn (packed: 128 tokens, so 32-byte key sectors; fp16 and
// int8: 1, int8's 4 warps then read 128-byte lines of its channel rows together).
KV_HD constexpr int stream_run_tiles(int kbits) {
  return kbits && kbits != 8 ? 128 / stream_tile_tokens(kbits) : 1;
}
// Tokens of a sequence in the staged tiles: [main_begin, main_begin + stream_main_tokens); the
// rest (sink, residual, a last partial tile) go token by token. int8 (attn_stream_int8.cu):
// every token, the last tile partial.
KV_HD int stream_main_begin(int kbits, int S) { return kbits ? S : 0; }
KV_HD int stream_main_tokens(int kbits, int L, int kq, int vq) {
  const int tt = stream_tile_tokens(kbits);
  if (kbits == 8) return L;
  return kbits ? (kq < vq ? kq : vq) / tt * tt : L / tt * tt;
}
// Streaming kernel then combine; "" or why it does not serve. Blocks of it one SM holds: 0 when
// the kind has no streaming kernel.
const char* launch_stream(const AttnKind& kind, int B, const AttnArgs& a, float* out, cudaStream_t s);
int stream_blocks_per_sm(const AttnKind& kind);

// The codebook kernel (attn_vq.cu): D = 128, 1 or 4 query heads per KV head, vq_warps warps per
// block (kVqWarps; CQ-4c8b: 16), each over its own tiles of kVqTile tokens (lane = token for the
// logits, lane = 4 channels for P V); vq_head_blocks blocks per KV head (CQ-4c8b: 2, a cluster,
// one per half of the channel groups).
constexpr int kVqWarps = 8, kVqTile = 32;
int vq_warps(const AttnVq& v, int group);
int vq_head_blocks(const AttnVq& v, int group);
// Shared memory of one block: fixed part plus n_smem entries of each role's books (CQ-4c8b:
// every entry).
int vq_smem_bytes(const AttnVq& v, int group, int n_smem);
// The most entries per codebook the shared memory holds (2^bits when all fit); -1: not even the
// staged code tiles fit.
int vq_max_smem_entries(const AttnVq& v, int group);
// Blocks of the codebook kernel one SM holds with a.vq.n_smem staged entries.
int vq_blocks_per_sm(const AttnVq& v, int group);
// The codebook kernel then combine; "" or why it does not serve.
const char* launch_vq(int group, int B, const AttnArgs& a, float* out, cudaStream_t s);

}  // namespace kvlab::gpu::attn
