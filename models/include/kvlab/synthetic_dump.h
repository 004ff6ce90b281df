// Realistic synthetic KV dumps of any size, generated on demand as a DumpReader.
//
// The model of the data (pre-RoPE, per layer l and KV head g; q heads of group g share its
// structure; all draws are pure functions of (seed, l, role, head, token block)):
//   keys     k_pre[t] = mean_g + basis_g * z_t + noise_g (.) eps_t
//            - channel scales log-normal (about 0.6x..1.7x);
//            - a handful of outlier channel pairs (1 .. head_dim/32) in the low-frequency half
//              of the RoPE pairs carry a large, persistent mean (8..14x the typical channel)
//              with small noise: KIVI's and KVQuant's stable key outlier channels;
//            - z_t: a rank-r latent (r = min(16, D/2), decaying spectrum): keys are low-rank-ish;
//            - a positional mean in a few high-frequency pairs that queries share, so RoPE
//              turns it into a recency bump in q.k (local heads);
//            - the first `sink_tokens` keys put their outlier pairs along the queries'
//              outlier direction, so they draw a large share of attention (StreamingLLM sinks).
//   queries  q_pre[t] = qmean_h + lambda_h basis_g * y_t + qnoise (.) eps_t: the same outlier
//            pairs (rotated a little from the keys' direction), the same latent subspace and
//            positional pairs as their KV head, per-head strengths: attention is far from
//            uniform (softmax entropy well below ln T) and differs from head to head.
//   values   v[t] = vmean + vscale (.) tau_t * eps_t: Gaussian per token with a mild per-token
//            scale tau_t and no outlier channels; sink tokens have small values (tau 0.1).
// q and k are q_pre, k_pre rounded to fp16, rotated by RoPE, rounded to fp16 again:
//   k[t][a] = h(h(c*x) - h(s*y)), k[t][b] = h(h(s*x) + h(c*y)), h = float rounding, then fp16,
//   for each pair (a, b) = (2j, 2j+1) (adjacent) or (j, j + D/2) (halves), x = k_pre[t][a],
//   y = k_pre[t][b], c = (float)cos(t * w_j), s = (float)sin(t * w_j), w_j = theta^(-2j/D) in
//   double (std::pow, std::cos, std::sin). Every stored value is fp16-representable.
// Token blocks have fixed size, so a longer dump starts with the bytes of a shorter one.
#pragma once
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "kvlab/dump.h"

namespace kvlab {

struct SyntheticDumpParams {
  std::string preset = "custom";  // recorded in DumpInfo::model as "synthetic:<preset>"
  int64_t layers = 2;             // L
  int64_t q_heads = 4;            // Hq, a multiple of kv_heads
  int64_t kv_heads = 2;           // Hkv
  int64_t head_dim = 16;          // D, even unless rope_style is none
  int64_t tokens = 256;           // T
  double rope_theta = 10000.0;    // RoPE base
  RopeStyle rope_style = RopeStyle::Adjacent;
  bool k_pre_rope = false;  // also offer keys before RoPE (role k_pre_rope)
  uint64_t seed = 0;        // same parameters and seed: same bytes everywhere
  int64_t sink_tokens = 1;  // leading tokens shaped as attention sinks (0: none)
};

// Presets: llama3-8b (32 layers, 32 q / 8 kv heads, D 128, theta 500000), llama2-7b (32, 32 / 32,
// 128, 10000), qwen3-8b (36, 32 / 8, 128, 1000000; shapes and theta only), tiny (2, 4 / 2, 16,
// 10000; for tests). Big presets default to 4096 tokens, tiny to 256.
std::string synthetic_preset_choices();  // the valid names: "llama3-8b, llama2-7b, qwen3-8b, tiny"
// Throws std::invalid_argument listing the valid names.
SyntheticDumpParams synthetic_preset(const std::string& name);

class SyntheticDump final : public DumpReader {
 public:
  // Throws std::invalid_argument naming the bad parameter (non-positive sizes, q heads not a
  // multiple of kv heads, odd head_dim with RoPE, negative sink_tokens, non-positive theta).
  explicit SyntheticDump(const SyntheticDumpParams& p);
  ~SyntheticDump() override;

  const DumpInfo& info() const override { return info_; }
  const std::string& path() const override { return name_; }  // "synthetic:<preset>"
  const SyntheticDumpParams& params() const { return p_; }

  Tensor read(int64_t layer, Role role) const override;
  Tensor read_head(int64_t layer, Role role, int64_t head) const override;  // generates only that head
  // Heads [head_begin, head_end) of a role into out ((head_end - head_begin) * T * D values),
  // as fp32 or as fp16 bits (half the memory: a 128K-token q layer is 1 GiB instead of 2).
  void generate(int64_t layer, Role role, int64_t head_begin, int64_t head_end, float* out) const;
  void generate_f16(int64_t layer, Role role, int64_t head_begin, int64_t head_end, uint16_t* out) const;

  // The key channels the model made outliers for (layer, kv head), ascending: ground truth
  // for tests and channel-selection studies.
  std::vector<int64_t> outlier_channels(int64_t layer, int64_t kv_head) const;

 private:
  struct RopeTable;
  const RopeTable& rope() const;  // built on first use, once
  std::unique_ptr<RopeTable> build_rope() const;
  template <class Out>
  void generate_any(int64_t layer, Role role, int64_t head_begin, int64_t head_end, Out* out) const;

  SyntheticDumpParams p_;
  DumpInfo info_;
  std::string name_;
  mutable std::once_flag rope_once_;
  mutable std::unique_ptr<RopeTable> rope_;
};

}  // namespace kvlab
