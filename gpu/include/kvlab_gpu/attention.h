// Decode attention on the GPU over kvlab's packed caches (one new query token per sequence, GQA,
// per-sequence lengths), its validation against an fp64 CPU reference over core's K_hat / V_hat,
// and its benchmark. The cache layout is docs/FORMATS.md section 9.
#pragma once
#include <cstdint>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "kvlab/method.h"
#include "kvlab/tensor.h"

namespace kvlab::gpu {

// B sequences on the device in one method's cache: sink and residual tokens in fp16, the rest
// packed as core's quantize writes it. Built by make_decode_cache (from host data, through core)
// or make_random_decode_cache (GPU quantize of random fp16 data, for the benchmark).
class DecodeCache {
 public:
  struct Impl;
  explicit DecodeCache(std::unique_ptr<Impl> impl);
  ~DecodeCache();
  const Impl& impl() const { return *impl_; }
  int batch() const;
  int kv_heads() const;
  int head_dim() const;
  const std::vector<int>& lengths() const;
  // Bytes a decode step must read: packed codes, scales, zeros, Kitty planes and index, and
  // the fp16 sink and residual rows, of both roles.
  int64_t bytes() const;

 private:
  std::unique_ptr<Impl> impl_;
};

// The method families with decode kernels: fp16, int8, kivi (kbits = vbits = 2 or 4), kitty
// (kbits = vbits = 2); profile kvlab. head_dim 128 (1 or 4 query heads per KV head) or 64 (4).
// vq (codebooks): head_dim 128, 1 or 4 query heads per KV head, where an encoder is set (below).
// Throws std::invalid_argument naming what is not served.
void check_decode_method(const Method& m, int64_t D);

// One KV head of a codebook (VQ / CQ) cache: the head's key and value codebooks and every
// token's codes. This library neither reads codebook files nor encodes (vq/ does): the full
// build's `kvlab gpu` sets an encoder, through which make_decode_cache serves the `vq` family.
struct VqHead {
  int vec = 0, bits = 0, stages = 0;
  std::vector<float> k_books, v_books;    // (stages, D / vec, 2^bits, vec) fp32
  std::vector<uint8_t> k_codes, v_codes;  // (L, stages, D / vec): vq_encode's codes
  int64_t layer = 0;  // the codebook file's layer these books are (Method::apply's HeadContext)
};
// k, v: one KV head, (1, L, D).
using VqEncoder =
    std::function<VqHead(const Method& m, const TensorView& k, const TensorView& v, int64_t kv_head)>;
void set_vq_encoder(VqEncoder encoder);
// Method::apply of m on (KV heads, L, D) keys and values: per KV head (HeadContext layer, head)
// for the vq family, whose apply takes one head; in one call otherwise.
Reconstruction decode_method_apply(const Method& m, const TensorView& k, const TensorView& v, int64_t layer);
// "CQ-<v>c<b>b" or "VQ<v,b,r>" (vq/'s spellings) -> {vec, bits, stages}; false for other text.
bool parse_vq_text(const std::string& text, int& vec, int& bits, int& stages);
// B sequences of L tokens, random codebooks and uniformly random codes (the benchmark's: no entry
// is hotter than another, the worst case for the shared-memory entries).
std::unique_ptr<DecodeCache> make_random_vq_cache(const std::string& spec, int B, int Hkv, int D, int L,
                                                  uint64_t seed);

// keys[b], values[b]: (KV heads, L_b, D), fp32 or fp16. Quantizes each sequence's ranges
// (m.schedule(L_b)) with core and uploads the bytes.
std::unique_ptr<DecodeCache> make_decode_cache(const Method& m, const std::vector<TensorView>& keys,
                                               const std::vector<TensorView>& values);
// B sequences of L tokens of random fp16 data, quantized on the GPU (same bytes as core).
std::unique_ptr<DecodeCache> make_random_decode_cache(const Method& m, int B, int Hkv, int D, int L,
                                                      uint64_t seed);

// Which decode kernel: the streaming kernel (per-warp tiles staged by cp.async; fp16, kivi
// 2/4-bit, int8 group=all and kitty 2-bit with up to 32 boosted channels per page, D 128, 4 query
// heads per KV head) where it serves, else the split kernel; codebook caches always run the
// codebook kernel (Split or Stream asked for them throws).
enum class DecodeKernel { Auto, Split, Stream, Codebook };
// "auto", "split", "stream" or "codebook"; throws std::invalid_argument naming the text otherwise.
DecodeKernel parse_decode_kernel(const std::string& s);
const char* decode_kernel_name(DecodeKernel k);

struct DecodeOptions {
  int splits = 0;                            // splits per sequence (0: enough blocks to fill the GPU)
  bool debug = false;                        // also return every K_hat / V_hat value the kernel computed
  DecodeKernel kernel = DecodeKernel::Auto;  // Stream: throws where it does not serve
};
// How a kernel split its sums for one sequence (decode_error_bound's chain lengths).
struct DecodeShape {
  DecodeKernel kernel = DecodeKernel::Split;  // Split, Stream or Codebook
  int splits = 1;
  int tile_tokens = 0;   // the kernel's tile
  int main_tokens = 0;   // Stream: tokens in staged tiles (the rest go one by one)
  bool mma = false;      // Stream over a packed cache: the staged tiles run on tensor cores
  int run_tiles = 1;     // Stream: consecutive tiles a warp takes in turn
  bool p_fixed = false;  // Stream int8: p split at the fixed exponent 2^14 (FORMATS.md 9.3)
  int warps = 8;         // Codebook: warps per block, each over its own tiles
};
struct DecodeResult {
  std::vector<float> out;           // (B, Hq, D)
  std::vector<float> k_hat, v_hat;  // debug: per sequence (KV heads, L_b, D), concatenated
  int splits = 0;
  DecodeKernel kernel = DecodeKernel::Split;  // the kernel that ran
  std::vector<DecodeShape> shapes;            // per sequence
};
// q: (B, Hq, D) fp32 on the host.
DecodeResult decode_attention(const DecodeCache& cache, const std::vector<float>& q, int Hq,
                              const DecodeOptions& opt = {});
// The same on device memory, for callers that hold q and out on the GPU (kvlab.gpu in Python):
// q, out (B, Hq, D) fp32 on the cache's device, no host copy of either; the kernels run on
// `stream` (a cudaStream_t; null: the legacy default stream) and the call returns once they are
// done (it synchronizes that stream: the split partials are freed). opt.debug is refused. The
// result's out stays empty; kernel, splits and shapes are filled.
DecodeResult decode_attention_device(const DecodeCache& cache, const float* q, float* out, int Hq,
                                     const DecodeOptions& opt, void* stream);
// The splits decode_attention uses when opt.splits is 0, for the kernel that runs (Split or
// Stream; Auto counts as Split).
int auto_splits(const DecodeCache& cache, DecodeKernel kernel = DecodeKernel::Auto);
// Why the streaming kernel does not serve this cache with Hq query heads ("" when it does).
std::string stream_refusal(const DecodeCache& cache, int Hq);

// fp64 reference for one sequence: q (Hq, D), k_hat, v_hat (Hkv, L, D) -> (Hq, D).
std::vector<double> decode_reference(const float* q, const float* k_hat, const float* v_hat, int Hq, int Hkv,
                                     int L, int D);
// |scale * code| + |zero| of every packed key / value element of sequence b (0 for fp16 rows), each
// (KV heads, L_b, D): the tensor-core kernel's bound reads them (it sums codes and zeros apart).
// Only for caches made by make_decode_cache; throws otherwise.
struct PackedMagnitudes {
  std::vector<float> k, v;
};
const PackedMagnitudes& packed_magnitudes(const DecodeCache& cache, int b);

// Error bound of the kernels' fp32 arithmetic for query head hq (docs/FORMATS.md section 9.3):
// |out - ref| <= bound for every channel of that head, for the kernel and sums of `shape`.
// k_extra, v_extra: that KV head's (L, D) rows of packed_magnitudes, required when shape.mma.
double decode_error_bound(const float* q_head, const float* k_hat, const float* v_hat, int L, int D,
                          const DecodeShape& shape, const float* k_extra = nullptr,
                          const float* v_extra = nullptr);

struct AttnValidationRow {
  std::string method, lengths, kernel;
  int Hq = 0, Hkv = 0, D = 0, splits = 0;
  int64_t hat_bytes = 0, hat_mismatches = 0;  // debug K_hat / V_hat vs Method::apply, bytes
  double max_err = 0, max_err_over_bound = 0;
  bool ok() const { return hat_mismatches == 0 && max_err_over_bound <= 1.0; }
};
struct AttnValidateOptions {
  std::vector<std::string> methods;        // empty: fp16, int8, kivi-4, kivi-2, kivi-2-sink, kitty
  std::vector<std::string> extra_methods;  // appended to the default list (`kvlab gpu`: vq methods)
  bool small = false;                      // short sequences only (compute-sanitizer runs)
  uint64_t seed = 1;
  // Auto: every case on the kernel auto picks and, where that is the streaming kernel, on the
  // split kernel too; Split / Stream: that kernel only (Stream skips the cases it refuses).
  DecodeKernel kernel = DecodeKernel::Auto;
};
std::vector<AttnValidationRow> validate_attention(const AttnValidateOptions& opt);
void print_attention_validation(const std::vector<AttnValidationRow>& rows, std::FILE* out);

struct AttnBenchOptions {
  // empty: fp16, int8, kivi-4, kivi-2, kitty, CQ-4c8b; a VQ spec (CQ-4c8b, VQ<4,8,2>) benchmarks
  // random codebooks and codes (make_random_vq_cache)
  std::vector<std::string> methods;
  std::vector<int> batches{1, 8, 32};
  std::vector<int> lengths{4096, 32768, 131072};
  int Hq = 32, Hkv = 8, D = 128;
  int reps = 20;
  DecodeKernel kernel = DecodeKernel::Auto;
  std::string csv;  // also write the rows here (read by scripts/attend_sdpa.py)
};
void attend_bench(const AttnBenchOptions& opt, std::FILE* out);

}  // namespace kvlab::gpu
