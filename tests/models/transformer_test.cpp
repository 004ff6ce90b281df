// models transformer.h: the shared decoder's bits do not depend on the thread count, RoPE leaves
// position 0 alone and rotates later ones in the layout asked for, and bad tokens or positions
// are refused.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "kvlab/threads.h"
#include "kvlab/transformer.h"

namespace {

using namespace kvlab;
using ::testing::HasSubstr;

// Random weights big enough that every product and the attention take the threaded path.
struct RandomModel {
  std::vector<std::vector<float>> store;
  TransformerWeights w;
  RandomModel(RopeStyle style) {
    TransformerConfig& c = w.config;
    c.dim = 128;
    c.hidden_dim = 256;
    c.n_layers = 2;
    c.n_heads = 4;
    c.n_kv_heads = 2;
    c.head_dim = 32;
    c.vocab_size = 512;
    c.rope_style = style;
    std::mt19937 rng(11);
    auto make = [&](int64_t n, float mean) {
      std::normal_distribution<float> d(mean, 0.1f);
      store.emplace_back(n);
      for (float& x : store.back()) x = d(rng);
      return store.back().data();
    };
    w.embedding = make(c.vocab_size * c.dim, 0.0f);
    w.final_norm = make(c.dim, 1.0f);
    w.classifier = make(c.vocab_size * c.dim, 0.0f);
    for (int l = 0; l < c.n_layers; ++l) {
      LayerWeights L;
      L.attn_norm = make(c.dim, 1.0f);
      L.wq = make(c.n_heads * c.head_dim * c.dim, 0.0f);
      L.wk = make(c.n_kv_heads * c.head_dim * c.dim, 0.0f);
      L.wv = make(c.n_kv_heads * c.head_dim * c.dim, 0.0f);
      L.bq = make(c.n_heads * c.head_dim, 0.0f);
      L.wo = make(c.dim * c.n_heads * c.head_dim, 0.0f);
      L.ffn_norm = make(c.dim, 1.0f);
      L.w_gate = make(c.hidden_dim * c.dim, 0.0f);
      L.w_up = make(c.hidden_dim * c.dim, 0.0f);
      L.w_down = make(c.dim * c.hidden_dim, 0.0f);
      w.layers.push_back(L);
    }
  }
};

std::vector<int32_t> tokens(int n) {
  std::vector<int32_t> t(n);
  for (int i = 0; i < n; ++i) t[i] = (i * 37 + 11) % 512;
  return t;
}

TEST(Transformer, ThreadCountChangesNoBits) {
  const RandomModel m(RopeStyle::Halves);
  const std::vector<int32_t> t = tokens(150);  // 3 attention row blocks
  std::vector<std::vector<float>> logits(2);
  std::vector<LayerKV> kv(2);
  for (int threads : {1, 2}) {
    ScopedThreads scope(threads);
    TransformerRunner r(m.w, 151);
    r.forward(t.data(), 150, 150, logits[threads - 1]);
    r.forward(t.data(), 1, 1, logits[threads - 1]);  // and one more position after the block
    kv[threads - 1] = r.captured(1);
  }
  EXPECT_EQ(logits[0], logits[1]);
  EXPECT_EQ(kv[0].q.data, kv[1].q.data);
  EXPECT_EQ(kv[0].k.data, kv[1].k.data);
  EXPECT_EQ(kv[0].v.data, kv[1].v.data);
  for (float x : logits[0]) ASSERT_TRUE(std::isfinite(x));
}

TEST(Transformer, RopeLayouts) {
  for (RopeStyle style : {RopeStyle::Adjacent, RopeStyle::Halves}) {
    const RandomModel m(style);
    const std::vector<int32_t> t = tokens(5);
    TransformerRunner r(m.w, 5);
    std::vector<float> logits;
    r.forward(t.data(), 5, 1, logits);
    const LayerKV kv = r.captured(0);
    const int64_t D = 32, T = 5;
    double rot_err = 0;
    for (int64_t h = 0; h < 2; ++h)
      for (int64_t p = 0; p < T; ++p)
        for (int64_t i = 0; i < D / 2; ++i) {
          const int64_t a = style == RopeStyle::Halves ? i : 2 * i,
                        b = style == RopeStyle::Halves ? i + D / 2 : 2 * i + 1;
          const float* pre = kv.k_pre_rope.data.data() + (h * T + p) * D;
          const float* k = kv.k.data.data() + (h * T + p) * D;
          const double angle = (double)p * std::pow(10000.0, -2.0 * (double)i / (double)D);
          rot_err = std::max(rot_err, std::abs(pre[a] * std::cos(angle) - pre[b] * std::sin(angle) - k[a]));
          rot_err = std::max(rot_err, std::abs(pre[a] * std::sin(angle) + pre[b] * std::cos(angle) - k[b]));
          if (p == 0) {
            EXPECT_EQ(k[a], pre[a]);
          }
        }
    EXPECT_LT(rot_err, 1e-5) << to_string(style);
  }
}

TEST(Transformer, RefusesBadTokensAndPositions) {
  const RandomModel m(RopeStyle::Halves);
  TransformerRunner r(m.w, 4);
  std::vector<float> logits;
  const int32_t bad[] = {1, 512};
  try {
    r.forward(bad, 2, 1, logits);
    FAIL() << "no exception";
  } catch (const std::out_of_range& e) {
    EXPECT_THAT(e.what(), HasSubstr("token 512 at position 1 outside the vocabulary [0, 512)"));
  }
  const std::vector<int32_t> t = tokens(5);
  EXPECT_THROW(r.forward(t.data(), 5, 1, logits), std::out_of_range);
}

}  // namespace
