// Channel sensitivity: the rank-1 fast path against the naive recomputation (1e-6 relative),
// against eval's attention reference, and the edge cases (short sequences, a constant channel,
// D = 8, thread counts).
#include <gtest/gtest.h>

#include <cmath>
#include <numeric>
#include <vector>

#include "kvlab/attention.h"
#include "kvlab/dump.h"
#include "kvlab/quantizer.h"
#include "kvlab/sensitivity.h"
#include "kvlab/synthetic_dump.h"

namespace {

using namespace kvlab;

LayerQKV layer_of(const DumpReader& r, int64_t l) {
  LayerQKV x;
  x.q = r.read(l, Role::Q);
  x.k = r.read(l, Role::K);
  x.v = r.read(l, Role::V);
  return x;
}

std::vector<SensitivityRow> run(const LayerQKV& x, const SensitivityOptions& o) {
  std::vector<SensitivityRow> rows;
  layer_sensitivity(0, x.q, x.k, select_queries(o.queries, x.k.shape[1]), o, rows);
  return rows;
}

void expect_fast_equals_naive(const LayerQKV& x, SensitivityOptions o) {
  o.naive = false;
  const std::vector<SensitivityRow> fast = run(x, o);
  o.naive = true;
  const std::vector<SensitivityRow> naive = run(x, o);
  ASSERT_EQ(fast.size(), naive.size());
  int nonzero = 0;
  for (size_t i = 0; i < fast.size(); ++i) {
    EXPECT_NEAR(fast[i].attn_score_mse, naive[i].attn_score_mse, 1e-6 * naive[i].attn_score_mse + 1e-300)
        << "q_head " << fast[i].q_head << " channel " << fast[i].channel;
    nonzero += naive[i].attn_score_mse > 0;
  }
  EXPECT_GT(nonzero, (int)fast.size() / 2);  // the comparison saw real perturbations
}

TEST(Sensitivity, FastEqualsNaiveOnTheDefaultDump) {
  const auto dump = open_dump(std::string(KVLAB_SOURCE_DIR) + "/data/stories260K.h5");
  ASSERT_EQ(dump->info().head_dim, 8);
  SensitivityOptions o;
  o.group = 32;
  o.sink = 4;
  o.queries = parse_queries("stride:3");
  for (int64_t l : {0L, dump->info().num_layers - 1}) expect_fast_equals_naive(layer_of(*dump, l), o);
}

TEST(Sensitivity, FastEqualsNaiveOnASyntheticDump) {
  SyntheticDumpParams p = synthetic_preset("tiny");  // D = 16, outlier channels, sinks
  p.tokens = 300;
  const SyntheticDump dump(p);
  SensitivityOptions o;
  o.group = 64;
  o.sink = 8;
  o.bits = 2;
  o.queries = parse_queries("last:70");  // two tiles, the first query before the last group
  expect_fast_equals_naive(layer_of(dump, 1), o);
  o.bits = 1;  // coarser: larger perturbations, more of the scalar expm1 path
  expect_fast_equals_naive(layer_of(dump, 0), o);
}

TEST(Sensitivity, LargeLogitShiftsTakeTheExactPath) {
  // A channel with large keys and queries: |a delta| far above the polynomial's 0.5 bound.
  SyntheticDumpParams p = synthetic_preset("tiny");
  p.tokens = 200;
  LayerQKV x = layer_of(SyntheticDump(p), 0);
  for (int64_t i = 0; i < x.k.shape[1]; ++i) x.k.data[(0 * 200 + i) * 16 + 3] *= 40.0f;
  for (int64_t h = 0; h < 2; ++h)
    for (int64_t i = 0; i < 200; ++i) x.q.data[(h * 200 + i) * 16 + 3] *= 10.0f;
  SensitivityOptions o;
  o.group = 32;
  o.sink = 4;
  o.queries = parse_queries("stride:7");
  expect_fast_equals_naive(x, o);
}

TEST(Sensitivity, HugeLogitShiftsStayFinite) {
  // Shifts far beyond exp's range in double (|q[c] delta| > 300) take the stabilized path.
  SyntheticDumpParams p = synthetic_preset("tiny");
  p.tokens = 200;
  LayerQKV x = layer_of(SyntheticDump(p), 0);
  for (int64_t i = 0; i < 200; ++i) x.k.data[i * 16 + 5] *= 3000.0f;
  for (int64_t h = 0; h < 2; ++h)
    for (int64_t i = 0; i < 200; ++i) x.q.data[(h * 200 + i) * 16 + 5] *= 300.0f;
  SensitivityOptions o;
  o.group = 32;
  o.sink = 4;
  o.queries = parse_queries("stride:9");
  const std::vector<SensitivityRow> rows = run(x, o);
  for (const SensitivityRow& r : rows)
    EXPECT_TRUE(std::isfinite(r.attn_score_mse)) << r.q_head << " " << r.channel;
  // Only channel 5 is compared: in the other channels the naive dot products absorb the small
  // perturbations into channel 5's huge term (their naive MSE rounds to 0), the rank-1 update
  // does not.
  o.naive = true;
  const std::vector<SensitivityRow> naive = run(x, o);
  int compared = 0;
  for (size_t i = 0; i < rows.size(); ++i)
    if (rows[i].channel == 5) {
      EXPECT_GT(naive[i].attn_score_mse, 0.0);
      EXPECT_NEAR(rows[i].attn_score_mse, naive[i].attn_score_mse, 1e-6 * naive[i].attn_score_mse);
      ++compared;
    }
  EXPECT_EQ(compared, 4);
}

TEST(Sensitivity, MatchesEvalsAttentionReference) {
  // An independent route: K_hat with channel c quantized alone through core, scored by eval's
  // float attention reference.
  SyntheticDumpParams p = synthetic_preset("tiny");
  p.tokens = 256;
  const LayerQKV x = layer_of(SyntheticDump(p), 0);
  SensitivityOptions o;
  o.group = 64;
  o.sink = 16;
  o.params = ParamType::F32;
  o.queries = parse_queries("last:40");
  const std::vector<SensitivityRow> rows = run(x, o);
  const std::vector<int64_t> pos = select_queries(o.queries, 256);
  const int64_t D = 16, T = 256, kb = 16, n = 192;
  QuantizerSpec s;
  s.bits = 2;
  s.axis = Axis::Channel;
  s.group = 64;
  for (int64_t c : {0L, 5L, 11L}) {
    Reconstruction cache{x.k, x.v};
    for (int64_t g = 0; g < 2; ++g) {
      Tensor col;
      col.shape = {n, 1};
      for (int64_t t = kb; t < kb + n; ++t) col.data.push_back(x.k.data[(g * T + t) * D + c]);
      const std::vector<float> deq = dequantize(quantize(col.view(), s));
      for (int64_t t = kb; t < kb + n; ++t) cache.k.data[(g * T + t) * D + c] = deq[t - kb];
    }
    const auto err = attention_errors(x.q.view(), x.k.view(), x.v.view(), {cache}, pos);
    for (int64_t h = 0; h < 4; ++h) {
      const double ref = err[0][h].score_mse(), ours = rows[h * D + c].attn_score_mse;
      EXPECT_NEAR(ours, ref, 1e-3 * ref + 1e-12) << "head " << h << " channel " << c;
    }
  }
}

TEST(Sensitivity, ConstantChannelIsHarmless) {
  SyntheticDumpParams p = synthetic_preset("tiny");
  p.tokens = 256;
  LayerQKV x = layer_of(SyntheticDump(p), 0);
  for (int64_t g = 0; g < 2; ++g)
    for (int64_t t = 0; t < 256; ++t) x.k.data[(g * 256 + t) * 16 + 6] = 1.25f;
  SensitivityOptions o;
  o.group = 64;
  o.sink = 16;
  o.queries = parse_queries("last:32");
  const std::vector<SensitivityRow> rows = run(x, o);
  for (const SensitivityRow& r : rows) {
    if (r.channel != 6) continue;
    EXPECT_EQ(r.attn_score_mse, 0.0);  // a constant group quantizes exactly
    EXPECT_EQ(r.stats.variance, 0.0);
    EXPECT_DOUBLE_EQ(r.stats.mean_abs, 1.25);
  }
  const std::vector<RankingRow> rk = rank_layer(rows, 0, 2, 16);
  ASSERT_EQ(rk.size(), 2u);
  EXPECT_TRUE(std::isfinite(rk[0].spearman));
}

TEST(Sensitivity, HeadDimEightHasNoDOver16Recall) {
  const auto dump = open_dump(std::string(KVLAB_SOURCE_DIR) + "/data/stories260K.h5");
  const DumpInfo& in = dump->info();
  const EvalShape shape{in.num_layers, in.num_q_heads, in.num_kv_heads, in.head_dim, in.tokens};
  SensitivityOptions o;
  o.group = 32;
  o.sink = 4;
  o.layers = parse_layers("1");
  o.queries = parse_queries("last:16");
  const SensitivityResult r = channel_sensitivity(
      shape, [&](int64_t l) { return layer_of(*dump, l); }, o);
  ASSERT_EQ(r.rankings.size(), (size_t)in.num_kv_heads);
  EXPECT_EQ(r.rows.size(), (size_t)(in.num_q_heads * 8));
  for (const RankingRow& rr : r.rankings) {
    EXPECT_EQ(rr.ks, (std::vector<int64_t>{0, 1, 2}));
    EXPECT_TRUE(std::isnan(rr.recall[0]));
    EXPECT_GE(rr.recall[2], 0.0);
    EXPECT_LE(rr.recall[2], 1.0);
  }
}

TEST(Sensitivity, ShortSequencesAndBadOptionsAreRefused) {
  const EvalShape shape{1, 2, 1, 8, 100};
  const LayerLoader never = [](int64_t) -> LayerQKV { throw std::logic_error("not reached"); };
  SensitivityOptions o;  // sink 32 + group 128 > 100 tokens
  try {
    channel_sensitivity(shape, never, o);
    FAIL() << "no error";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("--group 128"), std::string::npos) << e.what();
  }
  o.group = 0;
  EXPECT_THROW(channel_sensitivity(shape, never, o), std::invalid_argument);
  o.group = 32;
  o.bits = 9;
  EXPECT_THROW(channel_sensitivity(shape, never, o), std::invalid_argument);
  o.bits = 2;
  o.sink = -1;
  EXPECT_THROW(channel_sensitivity(shape, never, o), std::invalid_argument);
  o.sink = 0;
  o.group = 100;  // exactly one group: allowed (the loader is reached)
  EXPECT_THROW(channel_sensitivity(shape, never, o), std::logic_error);
}

TEST(Sensitivity, SameResultsForAnyThreadCount) {
  SyntheticDumpParams p = synthetic_preset("tiny");
  p.tokens = 256;
  const LayerQKV x = layer_of(SyntheticDump(p), 1);
  SensitivityOptions o;
  o.group = 64;
  o.sink = 16;
  o.queries = parse_queries("stride:2");
  o.threads = 1;
  const std::vector<SensitivityRow> a = run(x, o);
  o.threads = 3;
  const std::vector<SensitivityRow> b = run(x, o);
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(a[i].attn_score_mse, b[i].attn_score_mse);
}

}  // namespace
