// Attention error metrics of quantized caches against the double-loop oracle: score MSE, output
// relative error, KL, top-8 overlap; exact zeros for an identical cache; tiny perturbations
// (where the one-pass formulas could cancel); tile sizes; thread counts.
#include <gtest/gtest.h>

#include "eval_oracle.h"
#include "kvlab/attention.h"
#include "kvlab/method.h"
#include "kvlab/selection.h"
#include "kvlab/threads.h"

namespace {

using kvlab::AttnStats;
using kvlab::Reconstruction;
using kvlab::Tensor;

struct Case {
  Tensor q, k, v;
  std::vector<int64_t> pos;
};

Case make_case(int64_t Hq, int64_t Hkv, int64_t T, int64_t D, uint32_t seed, const char* queries = "all") {
  Case c{evtest::normal({Hq, T, D}, seed, 0.5f),
         evtest::keys({Hkv, T, D}, seed + 1),
         evtest::normal({Hkv, T, D}, seed + 2),
         {}};
  c.pos = kvlab::select_queries(kvlab::parse_queries(queries), T);
  return c;
}

// Relative agreement of every metric with the oracle, head by head.
void expect_matches_oracle(const Case& c, const Reconstruction& r, const AttnStats& got, int64_t h,
                           double tol, const std::string& what) {
  const AttnStats want = evtest::errors(c.q, c.k, c.v, r.k, r.v, h, c.pos);
  EXPECT_EQ(got.queries, want.queries);
  EXPECT_EQ(got.score_count, want.score_count);
  EXPECT_NEAR(got.score_mse(), want.score_mse(), tol * want.score_mse()) << what << " head " << h;
  EXPECT_NEAR(got.out_rel_err(), want.out_rel_err(), 10 * tol * want.out_rel_err()) << what << " head " << h;
  EXPECT_NEAR(got.kl(), want.kl(), tol * want.kl()) << what << " head " << h;
  EXPECT_NEAR(got.out_sq_ref, want.out_sq_ref, 1e-5 * want.out_sq_ref) << what << " head " << h;
  // Top-8 on fp32 logits: a near tie may order differently than in double.
  EXPECT_NEAR(got.topk_overlap(), want.topk_overlap(), 0.02) << what << " head " << h;
}

TEST(AttentionErrors, PresetsMatchDoubleLoop) {
  const Case c = make_case(4, 2, 320, 32, 11);
  std::vector<Reconstruction> caches;
  const std::vector<std::string> names = {"int8", "kivi-4", "kivi-2", "kitty:group=64,sink=8,residual=32"};
  for (const auto& n : names) caches.push_back(kvlab::parse_method(n)->apply(c.k.view(), c.v.view()));
  const auto got = kvlab::attention_errors(c.q.view(), c.k.view(), c.v.view(), caches, c.pos, {32, 64});
  ASSERT_EQ(got.size(), names.size());
  for (size_t m = 0; m < names.size(); ++m)
    for (int64_t h = 0; h < 4; ++h) {
      // Orders of magnitude apart between methods (score MSE 3e-8 .. 1e-4); each within 1e-6
      // of the oracle (measured: <= 1e-7), the output error within 1e-5.
      expect_matches_oracle(c, caches[m], got[m][h], h, 1e-6, names[m]);
      EXPECT_GT(got[m][h].score_mse(), 0.0);
    }
}

TEST(AttentionErrors, TinyPerturbationsKeepTheirPrecision) {
  // Keys moved by ~1e-5 relative: logit differences ~1e-5, KL ~1e-10. The one-pass sums would
  // cancel here without the Taylor series for d and w.
  Case c = make_case(2, 1, 200, 32, 12);
  Reconstruction r{c.k, c.v};
  std::mt19937 rng(3);
  std::normal_distribution<float> nd(0.0f, 1e-5f);
  for (auto& x : r.k.data) x *= 1.0f + nd(rng);
  for (auto& x : r.v.data) x *= 1.0f + nd(rng);
  const auto got = kvlab::attention_errors(c.q.view(), c.k.view(), c.v.view(), {r}, c.pos);
  for (int64_t h = 0; h < 2; ++h) {
    const AttnStats want = evtest::errors(c.q, c.k, c.v, r.k, r.v, h, c.pos);
    ASSERT_GT(want.kl(), 0.0);
    // Measured: 5e-7 (KL), 1e-7 (score) relative.
    EXPECT_NEAR(got[0][h].kl(), want.kl(), 1e-5 * want.kl()) << "head " << h;
    EXPECT_NEAR(got[0][h].score_mse(), want.score_mse(), 1e-5 * want.score_mse()) << "head " << h;
    // Output differences ~1e-5 relative against fp32 GEMM rounding ~1e-7 (measured: 4e-4).
    EXPECT_NEAR(got[0][h].out_rel_err(), want.out_rel_err(), 5e-3 * want.out_rel_err()) << "head " << h;
  }
}

TEST(AttentionErrors, FarApartDistributionsMatchDoubleLoop) {
  // Peaked attention (logits spread over tens of nats) against caches whose logits move by
  // ~10 nats (shared-scale sums) and by ~100 nats (rows recomputed exactly in fp64).
  Case c = make_case(2, 1, 300, 32, 17);
  for (auto& x : c.q.data) x *= 10.0f;
  Reconstruction moved{c.k, c.v}, flipped{c.k, c.v};
  std::mt19937 rng(5);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (auto& x : moved.k.data) x += nd(rng);
  for (auto& x : flipped.k.data) x *= -4.0f;
  const auto got =
      kvlab::attention_errors(c.q.view(), c.k.view(), c.v.view(), {moved, flipped}, c.pos, {16, 64});
  for (int64_t h = 0; h < 2; ++h) {
    for (int m = 0; m < 2; ++m) {
      const Reconstruction& r = m ? flipped : moved;
      const AttnStats want = evtest::errors(c.q, c.k, c.v, r.k, r.v, h, c.pos);
      const AttnStats& g = got[m][h];
      ASSERT_GT(want.kl(), m ? 10.0 : 0.1);  // the regimes this test is about
      EXPECT_NEAR(g.score_mse(), want.score_mse(), 1e-5 * want.score_mse()) << m << " head " << h;
      EXPECT_NEAR(g.kl(), want.kl(), 1e-5 * want.kl()) << m << " head " << h;
      EXPECT_NEAR(g.out_rel_err(), want.out_rel_err(), 1e-5 * want.out_rel_err()) << m << " head " << h;
      EXPECT_NEAR(g.topk_overlap(), want.topk_overlap(), 0.02) << m << " head " << h;
    }
  }
}

TEST(AttentionErrors, Fp16CacheIsNearlyExactAndIdenticalCacheIsExactlyZero) {
  const Case c = make_case(4, 2, 150, 16, 13, "stride:3");
  const Reconstruction fp16 = kvlab::parse_method("fp16")->apply(c.k.view(), c.v.view());
  const Reconstruction same{c.k, c.v};
  const auto got = kvlab::attention_errors(c.q.view(), c.k.view(), c.v.view(), {fp16, same}, c.pos);
  for (int64_t h = 0; h < 4; ++h) {
    // fp16 rounding of fp32 inputs: relative 2^-11 per element.
    EXPECT_LT(got[0][h].out_rel_err(), 1e-3);
    EXPECT_LT(got[0][h].kl(), 1e-5);
    EXPECT_GT(got[0][h].kl(), 0.0);
    EXPECT_EQ(got[1][h].score_sq_err, 0.0);
    EXPECT_EQ(got[1][h].out_sq_err, 0.0);
    EXPECT_EQ(got[1][h].kl_sum, 0.0);
    EXPECT_EQ(got[1][h].topk_overlap(), 1.0);
    EXPECT_GT(got[1][h].out_sq_ref, 0.0);
  }
}

TEST(AttentionErrors, TileSizesAgree) {
  const Case c = make_case(2, 1, 300, 32, 14);
  const Reconstruction r = kvlab::parse_method("kivi-2")->apply(c.k.view(), c.v.view());
  const auto base = kvlab::attention_errors(c.q.view(), c.k.view(), c.v.view(), {r}, c.pos, {64, 256});
  for (kvlab::AttentionTiles t :
       {kvlab::AttentionTiles{1, 1}, kvlab::AttentionTiles{5, 17}, kvlab::AttentionTiles{300, 300}}) {
    const auto got = kvlab::attention_errors(c.q.view(), c.k.view(), c.v.view(), {r}, c.pos, t);
    for (int64_t h = 0; h < 2; ++h) {
      const AttnStats &a = got[0][h], &b = base[0][h];
      // Stated bound: 1e-6 relative for every metric between any two tilings.
      EXPECT_NEAR(a.score_mse(), b.score_mse(), 1e-6 * b.score_mse());
      EXPECT_NEAR(a.kl(), b.kl(), 1e-6 * b.kl());
      EXPECT_NEAR(a.out_rel_err(), b.out_rel_err(), 1e-6 * b.out_rel_err());
      EXPECT_NEAR(a.topk_overlap(), b.topk_overlap(), 0.01);
    }
  }
}

TEST(AttentionErrors, SameBitsForAnyThreadCount) {
  const Case c = make_case(8, 2, 260, 32, 15);
  const Reconstruction r = kvlab::parse_method("kitty")->apply(c.k.view(), c.v.view());
  auto errors_with = [&](int threads) {
    const kvlab::ScopedThreads scope(threads);
    return kvlab::attention_errors(c.q.view(), c.k.view(), c.v.view(), {r}, c.pos, {16, 32});
  };
  const auto one = errors_with(1);
  for (int n : {2, 4, 7}) {
    const auto got = errors_with(n);
    for (int64_t h = 0; h < 8; ++h) {
      EXPECT_EQ(got[0][h].score_sq_err, one[0][h].score_sq_err) << n;
      EXPECT_EQ(got[0][h].out_sq_err, one[0][h].out_sq_err) << n;
      EXPECT_EQ(got[0][h].kl_sum, one[0][h].kl_sum) << n;
      EXPECT_EQ(got[0][h].topk_sum, one[0][h].topk_sum) << n;
    }
  }
}

TEST(AttentionErrors, FutureKeysDoNotChangeEarlierQueries) {
  // A per-token method (values) and fp16 keys: the cache at positions <= t does not depend on
  // later tokens, so neither may any metric of queries <= t.
  Case c = make_case(2, 1, 200, 16, 16, "last:50");
  c.pos.resize(20);  // positions 150..169
  const auto m = kvlab::parse_method("kivi:kbits=4,vbits=2,group=16,residual=0");
  const Reconstruction before = m->apply(c.k.view(), c.v.view());
  const auto a = kvlab::attention_errors(c.q.view(), c.k.view(), c.v.view(), {before}, c.pos);
  Case d = c;
  for (int64_t t = 176; t < 200; ++t)  // whole key groups after position 175
    for (int64_t ch = 0; ch < 16; ++ch) {
      d.k.data[t * 16 + ch] *= -7.0f;
      d.v.data[t * 16 + ch] += 100.0f;
    }
  const Reconstruction after = m->apply(d.k.view(), d.v.view());
  const auto b = kvlab::attention_errors(d.q.view(), d.k.view(), d.v.view(), {after}, d.pos);
  for (int64_t h = 0; h < 2; ++h) {
    EXPECT_EQ(a[0][h].score_sq_err, b[0][h].score_sq_err);
    EXPECT_EQ(a[0][h].out_sq_err, b[0][h].out_sq_err);
    EXPECT_EQ(a[0][h].kl_sum, b[0][h].kl_sum);
  }
}

}  // namespace
