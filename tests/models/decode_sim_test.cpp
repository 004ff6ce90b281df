// The decoder's decode-faithful simulation (transformer.h, CacheSimulation): one block over the
// whole text gives the logits of the plain token-by-token decode loop, in which each step
// rebuilds the cache from the tokens it has so far, within a stated bound; on the reference
// model (HF) and stories260K (llama2.c).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "kvlab/hf_model.h"
#include "kvlab/llama2c.h"
#include "kvlab/plan.h"
#include "kvlab/transformer.h"
#include "kvlab/vq_method.h"

namespace {

using namespace kvlab;
const std::string kSrc = KVLAB_SOURCE_DIR;

std::vector<float> block_logits(const TransformerWeights& w, const std::vector<int32_t>& t,
                                const std::string& m, std::vector<bool> layers = {}) {
  TransformerRunner r(w, (int64_t)t.size());
  r.simulate({parse_method(m), std::move(layers)});
  std::vector<float> out;
  r.forward(t.data(), (int64_t)t.size(), (int64_t)t.size(), out);
  return out;
}

// The plain decode loop: one token per forward.
std::vector<float> loop_logits(const TransformerWeights& w, const std::vector<int32_t>& t,
                               const std::string& m) {
  TransformerRunner r(w, (int64_t)t.size());
  r.simulate({parse_method(m), {}});
  std::vector<float> all, one;
  for (const int32_t tok : t) {
    r.forward(&tok, 1, 1, one);
    all.insert(all.end(), one.begin(), one.end());
  }
  return all;
}

double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double d = 0;
  for (size_t i = 0; i < a.size(); ++i) d = std::max(d, (double)std::fabs(a[i] - b[i]));
  return d;
}

// Block and loop differ only in the order of fp32 sums (Eigen's GEMM for a block, its GEMV for
// one row; score and value products split at group and window boundaries). Without
// quantization that is the bound: 1e-2 absolute on the logits (measured: 2.5e-3 on
// stories260K). With a quantized cache a last-bit difference in k or v can flip an fp16
// rounding or a quantization code, which moves the logits further; the bound is then 10% of
// the method's own effect, max |logit(method) - logit(fp16)| (measured up to 6%: fp8
// calibrated on 20 tokens), and at least the sum-order bound. A wrong view (a future token, a
// group quantized a step early, a stale window) moves the logits by the order of the effect.
constexpr double kSumOrderBound = 1e-2, kRelativeBound = 0.1;

void check_model(const TransformerWeights& w, const std::vector<int32_t>& tokens,
                 const std::vector<std::string>& methods) {
  const std::vector<float> fp16 = block_logits(w, tokens, "fp16");
  const double base = max_abs_diff(fp16, loop_logits(w, tokens, "fp16"));
  std::printf("fp16: block vs loop %.3g\n", base);
  EXPECT_LE(base, kSumOrderBound);
  for (const std::string& m : methods) {
    SCOPED_TRACE(m);
    const std::vector<float> block = block_logits(w, tokens, m), loop = loop_logits(w, tokens, m);
    const double d = max_abs_diff(block, loop), effect = max_abs_diff(block, fp16);
    std::printf("%s: block vs loop %.3g, method vs fp16 %.3g\n", m.c_str(), d, effect);
    EXPECT_LE(d, std::max(kSumOrderBound, kRelativeBound * effect));
    EXPECT_GT(effect, 3 * kSumOrderBound);  // the method does something the bound can tell apart
  }
}

TEST(DecodeSimulation, ReferenceModelBlockEqualsLoop) {
  const std::string dir = kSrc + "/data/kvlab-ref-18m";
  if (!std::filesystem::exists(dir + "/model.safetensors")) GTEST_SKIP() << "no reference model at " << dir;
  const HfModel model = load_hf_model(dir);
  std::vector<int32_t> tokens(48);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = (int32_t)((i * 7919 + 13) % 8000 + 1);
  check_model(
      model.weights, tokens,
      {"kivi:group=8,residual=8,sink=4", "kitty:group=8,residual=4,sink=4",
       "kivi:group=8,residual=12,sink=0,rot=hadamard:1", "int8:group=8", "fp8:calib=max,calib_tokens=20"});
}

// kvquant (keys before RoPE: the runner hands it the fp16 pre-RoPE keys and the model's RoPE)
// and plans (each layer its own method and rule, kvquant on two layers; per head, the two KV heads
// of each layer by different methods) on the reference model.
TEST(DecodeSimulation, ReferenceModelKvquantAndPlanBlockEqualsLoop) {
  const std::string dir = kSrc + "/data/kvlab-ref-18m";
  if (!std::filesystem::exists(dir + "/model.safetensors")) GTEST_SKIP() << "no reference model at " << dir;
  register_vq_method();
  register_plan_method();
  const HfModel model = load_hf_model(dir);
  std::vector<int32_t> tokens(48);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = (int32_t)((i * 7919 + 13) % 8000 + 1);
  Plan p;
  p.budget = p.bits = 4;
  p.metric = "kl";
  p.calibration = "test";
  p.num_layers = 6;
  p.num_kv_heads = 2;
  p.head_dim = 128;
  p.tokens = 48;
  const std::vector<std::string> menu = {"kvquant:bits=2,calib=first:16", "kivi:group=8,residual=8,sink=2",
                                         "int8:group=8"};
  for (const std::string& m : menu) p.candidates.push_back(parse_method(m)->spec());
  for (int64_t l = 0; l < 6; ++l) p.layers.push_back({l, p.candidates[(size_t)l % 3], 4.0, 0.0});
  const std::string plan = testing::TempDir() + "decode_sim_plan.json";
  std::ofstream(plan) << plan_to_json(p);
  // per head: the two KV heads of every layer differ (each by its own method's rule)
  Plan h = p;
  h.per_head = true;
  for (int64_t l = 0; l < 6; ++l) {
    h.layers[(size_t)l].method = "";
    for (int64_t g = 0; g < 2; ++g)
      h.layers[(size_t)l].heads.push_back({g, p.candidates[(size_t)(l + g) % 3], 4.0, 0.0});
  }
  const std::string heads = testing::TempDir() + "decode_sim_plan_heads.json";
  std::ofstream(heads) << plan_to_json(h);
  check_model(model.weights, tokens,
              {"kvquant:bits=2,calib=first:20", "plan:file=" + plan, "plan:file=" + heads});
}

TEST(DecodeSimulation, Llama2cBlockEqualsLoop) {
  const std::string bin = kSrc + "/data/stories260K/stories260K.bin";
  if (!std::filesystem::exists(bin)) GTEST_SKIP() << "no stories260K at " << bin;
  const Llama2cModel model = load_llama2c(bin);
  std::vector<int32_t> tokens(70);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = (int32_t)((i * 31 + 5) % 500 + 1);
  check_model(llama2c_weights(model), tokens,
              {"kivi:group=8,residual=8,sink=4", "kitty:group=8,residual=4,sink=2"});
}

// Quantizing only some layers leaves the others' caches fp16: layer 5 alone changes less than
// every layer, and an all-false list equals fp16.
TEST(DecodeSimulation, LayerSubset) {
  const std::string dir = kSrc + "/data/kvlab-ref-18m";
  if (!std::filesystem::exists(dir + "/model.safetensors")) GTEST_SKIP() << "no reference model at " << dir;
  const HfModel model = load_hf_model(dir);
  std::vector<int32_t> tokens(64);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = (int32_t)((i * 104729 + 3) % 8000 + 1);
  const TransformerWeights& w = model.weights;
  const std::string m = "kivi:group=8,residual=8,sink=0";
  const std::vector<float> fp16 = block_logits(w, tokens, "fp16"), all = block_logits(w, tokens, m);
  std::vector<bool> none(6, false), last(6, false);
  last[5] = true;
  EXPECT_EQ(max_abs_diff(block_logits(w, tokens, m, none), fp16), 0.0);
  const double one = max_abs_diff(block_logits(w, tokens, m, last), fp16);
  EXPECT_GT(one, 0.0);
  EXPECT_THROW(block_logits(w, tokens, m, std::vector<bool>(5, true)), std::invalid_argument);
  EXPECT_THROW(block_logits(w, tokens, "int8"), std::invalid_argument);  // group=all: not causal
}

}  // namespace
