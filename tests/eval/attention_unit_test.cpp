// The attention unit as a backend (kvlab/attention_unit.h): eval gives the same bits through an
// explicit CPU backend and with the next layer loaded on a second thread (prefetch); the fp64
// oracle of the GPU tests (tests/eval_gpu/unit_oracle.h) agrees with the CPU kernel.
#include <gtest/gtest.h>

#include <cstring>

#include "../eval_gpu/unit_oracle.h"
#include "../eval_gpu/unit_test_data.h"
#include "eval_oracle.h"
#include "kvlab/evaluate.h"

namespace {

void expect_same_bits(const kvlab::EvalResult& a, const kvlab::EvalResult& b) {
  ASSERT_EQ(a.methods.size(), b.methods.size());
  for (size_t m = 0; m < a.methods.size(); ++m) {
    ASSERT_EQ(a.methods[m].layers.size(), b.methods[m].layers.size());
    for (size_t l = 0; l < a.methods[m].layers.size(); ++l)
      for (size_t h = 0; h < a.methods[m].layers[l].attn.size(); ++h) {
        const kvlab::AttnStats &x = a.methods[m].layers[l].attn[h], &y = b.methods[m].layers[l].attn[h];
        EXPECT_EQ(std::memcmp(&x, &y, sizeof x), 0) << a.methods[m].name << " layer " << l << " head " << h;
      }
  }
}

TEST(AttentionUnit, CpuBackendAndPrefetchGiveTheSameBits) {
  const int64_t L = 3, Hq = 4, Hkv = 2, T = 200, D = 32;
  std::vector<kvlab::LayerQKV> layers;
  for (int64_t l = 0; l < L; ++l)
    layers.push_back({evtest::normal({Hq, T, D}, 10 + l, 0.5f), evtest::keys({Hkv, T, D}, 20 + l),
                      evtest::normal({Hkv, T, D}, 30 + l)});
  const kvlab::EvalShape shape{L, Hq, Hkv, D, T};
  const kvlab::LayerLoader load = [&](int64_t l) { return layers.at(l); };
  kvlab::EvalOptions opt;
  opt.methods = {"int8", "kivi-2", "kitty:group=64,sink=8,residual=32"};
  opt.queries = kvlab::parse_queries("stride:3");
  const kvlab::EvalResult plain = kvlab::evaluate(shape, load, opt);
  int calls = 0;
  const kvlab::AttentionBackend counted = [&](const kvlab::AttentionUnit& u, kvlab::AttentionUnitResult& r,
                                              kvlab::AttentionTimes* t) {
    ++calls;
    EXPECT_EQ(u.heads, Hq / Hkv);
    kvlab::cpu_attention_unit(u, r, t);
  };
  opt.backend = counted;
  opt.prefetch = true;
  const kvlab::EvalResult unit = kvlab::evaluate(shape, load, opt);
  EXPECT_EQ(calls, L * Hkv);
  expect_same_bits(plain, unit);
}

TEST(AttentionUnit, LoaderErrorsPassThroughPrefetch) {
  const kvlab::EvalShape shape{2, 2, 1, 16, 64};
  const kvlab::LayerLoader load = [](int64_t l) -> kvlab::LayerQKV {
    if (l == 1) throw std::runtime_error("layer 1 is unreadable");
    return {evtest::normal({2, 64, 16}, 1), evtest::keys({1, 64, 16}, 2), evtest::normal({1, 64, 16}, 3)};
  };
  kvlab::EvalOptions opt;
  opt.methods = {"int8"};
  opt.prefetch = true;
  EXPECT_THROW(
      {
        try {
          kvlab::evaluate(shape, load, opt);
        } catch (const std::runtime_error& e) {
          EXPECT_STREQ(e.what(), "layer 1 is unreadable");
          throw;
        }
      },
      std::runtime_error);
}

// The oracle the GPU unit is held to, checked here against the CPU kernel (fp32 GEMMs: its own
// rounding, about 1e-6 relative on these inputs).
TEST(AttentionUnit, Fp64OracleAgreesWithCpuKernel) {
  const evgpu::UnitData data(5);
  kvlab::AttentionUnitResult cpu;
  kvlab::cpu_attention_unit(data.unit, cpu, nullptr);
  const kvlab::AttentionUnitResult want = evgpu::unit_oracle(data.unit);
  for (size_t m = 0; m < want.stats.size(); ++m)
    for (int64_t h = 0; h < data.heads; ++h) {
      const kvlab::AttnStats &g = cpu.stats[m][h], &w = want.stats[m][h];
      EXPECT_EQ(g.score_count, w.score_count);
      EXPECT_EQ(g.queries, w.queries);
      EXPECT_NEAR(g.score_sq_err, w.score_sq_err, 1e-5 * w.score_sq_err) << m << " " << h;
      EXPECT_NEAR(g.kl_sum, w.kl_sum, 1e-5 * w.kl_sum) << m << " " << h;
      EXPECT_NEAR(g.out_sq_err, w.out_sq_err, 1e-4 * w.out_sq_err) << m << " " << h;
      EXPECT_NEAR(g.out_sq_ref, w.out_sq_ref, 1e-5 * w.out_sq_ref) << m << " " << h;
      EXPECT_NEAR(g.topk_sum, w.topk_sum, 0.02 * w.queries) << m << " " << h;
      EXPECT_GT(w.kl_sum, 0.0);
    }
}

}  // namespace
