// DecodeCache's device buffers (host code of the attention files).
#pragma once
#include <vector>

#include "api_internal.h"
#include "attn_types.h"
#include "kvlab_gpu/attention.h"

namespace kvlab::gpu {

struct DecodeCache::Impl {
  attn::AttnKind kind;
  int B = 0, Hkv = 0, D = 0;
  std::vector<int> lens;
  std::vector<DeviceQuant> packed;  // the packed key and value parts
  std::vector<DeviceBuffer> fp16;   // the fp16 sink and residual rows
  std::vector<attn::AttnSeq> seqs;  // host copy
  DeviceBuffer dev_seqs;
  int64_t bytes = 0;
  std::vector<PackedMagnitudes> mags;  // per sequence (make_decode_cache only)
  // codebook caches (kind.vq): the layout (vq.n_smem is set per launch), books per role
  // (KV heads, stages, D / vec, 2^bits, vec) and codes per role (attn_vq_cache.cpp)
  attn::AttnVq vq;
  DeviceBuffer vq_books[2];
  std::vector<DeviceBuffer> vq_codes;
  int64_t vq_layer = 0;  // the codebook file's layer (decode_method_apply)
  void finish();         // upload seqs, count bytes
};

// Device buffers and arguments of one decode step (q, partials, output); run() launches it.
struct DecodeLaunch {
  DeviceBuffer q, out, part_o, part_ml;
  attn::AttnArgs args;
  int group = 0;
  bool stream = false;  // the streaming kernel (else the split kernel)
  DecodeLaunch(const DecodeCache::Impl& c, int Hq, int splits, bool stream);
  void run(const DecodeCache::Impl& c, cudaStream_t s) const;  // throws when no kernel serves
};

// The kernel decode_attention runs for `want` (Auto: streaming where it serves); throws when
// Stream is asked for and does not serve.
DecodeKernel pick_kernel(const DecodeCache& cache, int Hq, DecodeKernel want);
// What the error bound needs to know of the run (DecodeShape per sequence).
std::vector<DecodeShape> decode_shapes(const DecodeCache::Impl& c, DecodeKernel k, int splits, int group);

// make_decode_cache of a `vq` method, through the encoder set_vq_encoder set.
std::unique_ptr<DecodeCache> make_vq_decode_cache(const Method& m, const std::vector<TensorView>& keys,
                                                  const std::vector<TensorView>& values);

// The kernel kind serving m (check_decode_method's rules).
attn::AttnKind decode_kind(const Method& m, int64_t D);
// Kernel and layout constraints on one packed part (word-aligned groups); throws naming them.
void check_part(const attn::AttnPart& p, const attn::AttnKind& kind, bool key);

}  // namespace kvlab::gpu
