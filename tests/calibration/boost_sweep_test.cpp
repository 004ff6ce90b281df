// boost_sweep: Kitty at each rate with each selector, scored by eval's attention reference.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "kvlab/attention.h"
#include "kvlab/boost_sweep.h"
#include "kvlab/sensitivity.h"
#include "kvlab/synthetic_dump.h"

namespace {

using namespace kvlab;

struct Fixture {
  SyntheticDump dump;
  EvalShape shape;
  LayerLoader load;
  explicit Fixture(int64_t tokens) : dump(params(tokens)) {
    const DumpInfo& i = dump.info();
    shape = {i.num_layers, i.num_q_heads, i.num_kv_heads, i.head_dim, i.tokens};
    load = [this](int64_t l) {
      LayerQKV x;
      x.q = dump.read(l, Role::Q);
      x.k = dump.read(l, Role::K);
      x.v = dump.read(l, Role::V);
      return x;
    };
  }
  static SyntheticDumpParams params(int64_t tokens) {
    SyntheticDumpParams p = synthetic_preset("tiny");  // 2 layers, 4 q / 2 kv heads, D 16
    p.tokens = tokens;
    return p;
  }
};

SweepOptions small() {
  SweepOptions o;
  o.method = "kitty:group=32,sink=8";
  o.rates = {0, 0.125, 0.25, 1};
  o.seeds = 3;
  o.calib_queries = 64;
  o.selectors.push_back(Selector::PrefixMagnitude);
  return o;
}

const SweepSummary& find(const SweepResult& r, Selector s, double rate) {
  for (const SweepSummary& x : r.summary)
    if (x.selector == s && x.rate == rate) return x;
  throw std::logic_error("no summary");
}

TEST(BoostSweep, RatesZeroAndOneLeaveNothingToChoose) {
  Fixture f(512);
  const SweepResult r = boost_sweep(f.shape, f.load, small());
  ASSERT_EQ(r.rows.size(), 4u * (4 + 3));
  for (double rate : {0.0, 1.0}) {
    const double ref = find(r, Selector::Magnitude, rate).score_mse_mean;
    EXPECT_GT(ref, 0.0);
    for (Selector s : {Selector::Random, Selector::Variance, Selector::Oracle, Selector::PrefixMagnitude}) {
      // every run is the same cache: min and max equal the magnitude run exactly
      EXPECT_EQ(find(r, s, rate).score_mse_min, ref) << to_string(s) << " at " << rate;
      EXPECT_EQ(find(r, s, rate).score_mse_max, ref) << to_string(s) << " at " << rate;
      EXPECT_DOUBLE_EQ(find(r, s, rate).score_mse_mean, ref);
    }
  }
}

TEST(BoostSweep, BitsGrowWithTheRateAndNotWithTheSelector) {
  Fixture f(512);
  const SweepResult r = boost_sweep(f.shape, f.load, small());
  EXPECT_LT(find(r, Selector::Oracle, 0.0).bits, find(r, Selector::Oracle, 0.125).bits);
  EXPECT_LT(find(r, Selector::Oracle, 0.25).bits, find(r, Selector::Oracle, 1.0).bits);
  EXPECT_EQ(find(r, Selector::Random, 0.25).bits, find(r, Selector::Magnitude, 0.25).bits);
  // more boosted channels, less error, for the paper's selector
  EXPECT_GT(find(r, Selector::Magnitude, 0.0).score_mse_mean,
            find(r, Selector::Magnitude, 1.0).score_mse_mean);
  // random seeds differ where there is a choice
  EXPECT_GT(find(r, Selector::Random, 0.125).score_mse_std, 0.0);
  EXPECT_EQ(find(r, Selector::Random, 0.125).runs, 3);
  // every evaluated query lies after the calibration prefix (T/2)
  EXPECT_EQ(r.calib_tokens, 256);
  EXPECT_GE(r.first_query, 256);
}

TEST(BoostSweep, PrefixMagnitudeUsesThePrefixMeanAbs) {
  // Rebuild the prefix-magnitude cache by hand (mean |k| over the prefix's quantized keys
  // [sink, sink + G), top k per head, every page) and score it with eval: the same sums.
  Fixture f(512);
  SweepOptions o = small();
  o.selectors = {Selector::PrefixMagnitude};
  o.rates = {0.125};
  o.calib_tokens = 40;  // sink 8 + one group of 32
  const SweepResult r = boost_sweep(f.shape, f.load, o);
  const MethodPtr m = kitty_with_boost(*parse_method(o.method), 0.125);
  const std::vector<int64_t> pos = select_queries(parse_queries("last:256"), 512);
  const Schedule s = m->schedule(512);
  AttnStats want;
  for (int64_t l = 0; l < 2; ++l) {
    const LayerQKV x = f.load(l);
    std::vector<double> score;
    Tensor range;
    range.shape = {2, s.key_end - s.key_begin, 16};
    for (int64_t g = 0; g < 2; ++g) {
      for (const ChannelStats& c : channel_stats(&x.k.data[g * 512 * 16], 16, 8, 40))
        score.push_back(c.mean_abs);
      range.data.insert(range.data.end(), x.k.data.begin() + (g * 512 + s.key_begin) * 16,
                        x.k.data.begin() + (g * 512 + s.key_end) * 16);
    }
    const auto ch = select_boost_channels(Selector::PrefixMagnitude, range, 32, 2, 0, score);
    const auto err = attention_errors(x.q.view(), x.k.view(), x.v.view(),
                                      {apply_kitty(*m, x.k.view(), x.v.view(), ch)}, pos);
    for (const AttnStats& a : err[0]) want.merge(a);
  }
  EXPECT_EQ(r.rows[0].attn.score_sq_err, want.score_sq_err);
  EXPECT_EQ(r.rows[0].attn.out_sq_err, want.out_sq_err);
  o.calib_tokens = 39;  // no whole group after the sink
  EXPECT_THROW(boost_sweep(f.shape, f.load, o), std::invalid_argument);
}

TEST(BoostSweep, OracleBeatsRandomOnOutlierChannels) {
  // The synthetic keys have a few large outlier channels; measured sensitivity finds them.
  Fixture f(512);
  SweepOptions o = small();
  o.rates = {0.125};
  const SweepResult r = boost_sweep(f.shape, f.load, o);
  EXPECT_LT(find(r, Selector::Oracle, 0.125).score_mse_mean, find(r, Selector::Random, 0.125).score_mse_min);
}

TEST(BoostSweep, BadOptionsAreRefused) {
  Fixture f(512);
  SweepOptions o = small();
  o.rates = {0.5, 1.5};
  EXPECT_THROW(boost_sweep(f.shape, f.load, o), std::invalid_argument);
  EXPECT_THROW(parse_rates("0,1.5"), std::invalid_argument);
  EXPECT_THROW(parse_rates("-0.1"), std::invalid_argument);
  EXPECT_THROW(parse_rates("0,,1"), std::invalid_argument);
  EXPECT_THROW(parse_rates("nan"), std::invalid_argument);
  EXPECT_EQ(parse_rates("0,0.0625,1"), (std::vector<double>{0, 0.0625, 1}));
  o = small();
  o.rates.clear();
  EXPECT_THROW(boost_sweep(f.shape, f.load, o), std::invalid_argument);
  o = small();
  o.method = "kivi-2";
  EXPECT_THROW(boost_sweep(f.shape, f.load, o), std::invalid_argument);
  o = small();
  o.queries = parse_queries("last:300");  // reaches into the 256-token prefix
  try {
    boost_sweep(f.shape, f.load, o);
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("--calib-tokens"), std::string::npos) << e.what();
  }
  o = small();
  o.calib_tokens = 20;  // < sink 8 + group 32: the oracle has nothing to measure
  EXPECT_THROW(boost_sweep(f.shape, f.load, o), std::invalid_argument);
  o = small();
  o.seeds = 0;
  EXPECT_THROW(boost_sweep(f.shape, f.load, o), std::invalid_argument);
}

TEST(BoostSweep, ShortSequencesAreRefused) {
  Fixture f(36);  // sink 8 + group 32 = 40 > 36 tokens: no key page
  try {
    boost_sweep(f.shape, f.load, small());
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("T >= 40"), std::string::npos) << e.what();
  }
}

}  // namespace

namespace {

// A backend (kvlab/attention_unit.h) computes every attention unit of the sweep: the CPU kernel
// through it gives the same bits as without.
TEST(BoostSweep, BackendComputesEveryUnitWithTheSameBits) {
  Fixture f(512);
  const SweepResult plain = boost_sweep(f.shape, f.load, small());
  SweepOptions o = small();
  int calls = 0;
  o.backend = [&](const AttentionUnit& u, AttentionUnitResult& r, AttentionTimes* t) {
    ++calls;
    cpu_attention_unit(u, r, t);
  };
  const SweepResult through = boost_sweep(f.shape, f.load, o);
  EXPECT_GT(calls, 0);
  ASSERT_EQ(plain.rows.size(), through.rows.size());
  for (size_t i = 0; i < plain.rows.size(); ++i) {
    EXPECT_EQ(plain.rows[i].attn.score_sq_err, through.rows[i].attn.score_sq_err) << i;
    EXPECT_EQ(plain.rows[i].attn.out_sq_err, through.rows[i].attn.out_sq_err) << i;
    EXPECT_EQ(plain.rows[i].attn.kl_sum, through.rows[i].attn.kl_sum) << i;
    EXPECT_EQ(plain.rows[i].attn.topk_sum, through.rows[i].attn.topk_sum) << i;
  }
}

}  // namespace
