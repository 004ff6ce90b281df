// The attention reference: against a double loop, GQA mapping, causal mask, query selection,
// tiling invariance, thread-count determinism (torch: torch_sdpa_test.cpp).
#include <gtest/gtest.h>

#include "eval_oracle.h"
#include "kvlab/attention.h"
#include "kvlab/selection.h"
#include "kvlab/threads.h"

namespace {

using kvlab::AttentionTiles;
using kvlab::Tensor;

struct Inputs {
  Tensor q, k, v;
};

Inputs inputs(int64_t Hq, int64_t Hkv, int64_t T, int64_t D, uint32_t seed) {
  return {evtest::normal({Hq, T, D}, seed, 0.5f), evtest::keys({Hkv, T, D}, seed + 10),
          evtest::normal({Hkv, T, D}, seed + 20)};
}

std::vector<int64_t> all(int64_t T) { return kvlab::select_queries({}, T); }

// max |a - b| / max |b|
double rel_diff(const std::vector<float>& a, const std::vector<double>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    num = std::max(num, std::fabs(a[i] - b[i]));
    den = std::max(den, std::fabs(b[i]));
  }
  return num / den;
}

TEST(Attention, MatchesDoubleLoop) {
  const auto in = inputs(4, 2, 300, 32, 1);
  const auto pos = all(300);
  const Tensor o = kvlab::attention(in.q.view(), in.k.view(), in.v.view(), pos, {16, 48});
  ASSERT_EQ(o.shape, (std::vector<int64_t>{4, 300, 32}));
  // fp32 GEMMs over <= 300 keys with fp64 sums: a few fp32 ulps of the largest output.
  EXPECT_LT(rel_diff(o.data, evtest::attention(in.q, in.k, in.v, pos)), 2e-6);
}

TEST(Attention, GqaMapsQueryHeadToKvHeadByDivision) {
  // Hq = 6, Hkv = 3: heads 0,1 -> 0; 2,3 -> 1; 4,5 -> 2 (a modulo mapping would give 0,1,2,0,1,2).
  auto in = inputs(6, 3, 64, 16, 2);
  for (int64_t i = 0; i < 64 * 16; ++i) {
    in.v.data[64 * 16 * 1 + i] += 5.0f;
    in.v.data[64 * 16 * 2 + i] -= 5.0f;
  }
  const auto pos = all(64);
  const Tensor o = kvlab::attention(in.q.view(), in.k.view(), in.v.view(), pos);
  const auto ref = evtest::attention(in.q, in.k, in.v, pos);
  EXPECT_LT(rel_diff(o.data, ref), 2e-6);
  // Each head alone against its KV head gives the same outputs (to GEMM rounding: heads sharing
  // a KV head are stacked into one GEMM).
  for (int64_t h = 0; h < 6; ++h) {
    const int64_t g = h / 2;
    Tensor q1{{1, 64, 16}, {}}, k1{{1, 64, 16}, {}}, v1{{1, 64, 16}, {}};
    q1.data.assign(in.q.data.begin() + h * 1024, in.q.data.begin() + (h + 1) * 1024);
    k1.data.assign(in.k.data.begin() + g * 1024, in.k.data.begin() + (g + 1) * 1024);
    v1.data.assign(in.v.data.begin() + g * 1024, in.v.data.begin() + (g + 1) * 1024);
    const Tensor o1 = kvlab::attention(q1.view(), k1.view(), v1.view(), pos);
    for (int64_t i = 0; i < 1024; ++i) ASSERT_NEAR(o1.data[i], o.data[h * 1024 + i], 1e-5) << "head " << h;
  }
}

TEST(Attention, CausalMaskIgnoresFutureKeysAndValues) {
  const int64_t T = 200;
  auto in = inputs(2, 1, T, 16, 3);
  const std::vector<int64_t> pos = {0, 5, 63, 64, 100, 150};  // all < 151
  const Tensor before = kvlab::attention(in.q.view(), in.k.view(), in.v.view(), pos, {4, 32});
  for (int64_t t = 151; t < T; ++t)
    for (int64_t c = 0; c < 16; ++c) {
      in.k.data[t * 16 + c] = 1e3f * (c + 1);
      in.v.data[t * 16 + c] = -1e4f;
    }
  const Tensor after = kvlab::attention(in.q.view(), in.k.view(), in.v.view(), pos, {4, 32});
  EXPECT_EQ(before.data, after.data);
  // Position 0 sees key 0 alone: O = v_0 exactly.
  for (int64_t c = 0; c < 16; ++c) EXPECT_EQ(after.data[c], in.v.data[c]);
}

TEST(Attention, SelectedQueriesAreRowsOfAllQueries) {
  const int64_t T = 257;
  const auto in = inputs(2, 2, T, 16, 4);
  const Tensor full = kvlab::attention(in.q.view(), in.k.view(), in.v.view(), all(T));
  for (const char* sel : {"last:1", "last:70", "stride:1", "stride:16", "stride:257"}) {
    const auto pos = kvlab::select_queries(kvlab::parse_queries(sel), T);
    const Tensor o = kvlab::attention(in.q.view(), in.k.view(), in.v.view(), pos);
    const int64_t N = pos.size();
    for (int64_t h = 0; h < 2; ++h)
      for (int64_t i = 0; i < N; ++i)
        for (int64_t c = 0; c < 16; ++c)
          EXPECT_NEAR(o.data[(h * N + i) * 16 + c], full.data[(h * T + pos[i]) * 16 + c], 1e-5) << sel;
  }
}

TEST(Attention, TileSizesAgreeToFp32Rounding) {
  const int64_t T = 333;
  const auto in = inputs(4, 2, T, 32, 5);
  const auto pos = all(T);
  const auto ref = evtest::attention(in.q, in.k, in.v, pos);
  const Tensor base = kvlab::attention(in.q.view(), in.k.view(), in.v.view(), pos, {64, 256});
  for (AttentionTiles t :
       {AttentionTiles{1, 1}, AttentionTiles{7, 13}, AttentionTiles{64, 512}, AttentionTiles{400, 400}}) {
    const Tensor o = kvlab::attention(in.q.view(), in.k.view(), in.v.view(), pos, t);
    // Stated bound: 2e-6 of the largest output, the same as against the double loop.
    EXPECT_LT(rel_diff(o.data, ref), 2e-6) << t.query_tile << "x" << t.key_tile;
    double worst = 0;
    for (size_t i = 0; i < o.data.size(); ++i)
      worst = std::max(worst, (double)std::fabs(o.data[i] - base.data[i]));
    EXPECT_LT(worst, 1e-5) << t.query_tile << "x" << t.key_tile;
  }
}

TEST(Attention, SameBitsForAnyThreadCount) {
  const int64_t T = 300;
  const auto in = inputs(8, 2, T, 32, 6);
  const auto pos = all(T);
  auto attention_with = [&](int threads) {
    const kvlab::ScopedThreads scope(threads);
    return kvlab::attention(in.q.view(), in.k.view(), in.v.view(), pos, {16, 64});
  };
  const Tensor one = attention_with(1);
  for (int n : {2, 3, 5}) {
    const Tensor o = attention_with(n);
    EXPECT_EQ(o.data, one.data) << n << " threads";
  }
}

TEST(Attention, BadInput) {
  const auto in = inputs(4, 2, 16, 8, 7);
  auto expect_throw = [&](const Tensor& q, const Tensor& k, const Tensor& v, std::vector<int64_t> pos,
                          const std::string& needle) {
    try {
      kvlab::attention(q.view(), k.view(), v.view(), pos);
      ADD_FAILURE() << "no error for " << needle;
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  expect_throw(in.q, in.k, in.v, {16}, "position 0 is 16");
  expect_throw(in.q, in.k, in.v, {3, 3}, "ascend");
  expect_throw(in.q, in.k, in.v, {}, "no query positions");
  expect_throw(evtest::normal({3, 16, 8}, 1), in.k, in.v, {0}, "not a multiple");
  expect_throw(in.q, in.k, evtest::normal({2, 15, 8}, 1), {0}, "differ in shape");
  expect_throw(evtest::normal({4, 16, 4}, 1), in.k, in.v, {0}, "does not match");
}

}  // namespace
