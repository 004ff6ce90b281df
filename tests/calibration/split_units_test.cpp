// The unit functions the MPI driver runs (docs/SCALING.md) give the whole-layer bits: eval's
// (layer, KV head, method) units through eval_head one method at a time and in reverse order,
// sensitivity's (layer, KV head) units through head_sensitivity, the boost sweep's through
// sweep_heads with the head offset. No MPI needed: this is the property the ranks rely on.
#include <gtest/gtest.h>

#include <cstring>

#include "kvlab/boost_sweep.h"
#include "kvlab/evaluate.h"
#include "kvlab/sensitivity.h"
#include "kvlab/synthetic_dump.h"

namespace {

using namespace kvlab;

SyntheticDumpParams tiny() {
  SyntheticDumpParams p = synthetic_preset("tiny");
  p.tokens = 320;
  return p;
}

EvalShape shape_of(const DumpReader& r) {
  const DumpInfo& i = r.info();
  return {i.num_layers, i.num_q_heads, i.num_kv_heads, i.head_dim, i.tokens};
}

LayerLoader loader(const DumpReader& r) {
  return [&r](int64_t l) { return LayerQKV{r.read(l, Role::Q), r.read(l, Role::K), r.read(l, Role::V)}; };
}

Tensor heads(const DumpReader& r, int64_t layer, Role role, int64_t first, int64_t n) {
  Tensor out;
  for (int64_t h = first; h < first + n; ++h) {
    const Tensor x = r.read_head(layer, role, h);
    out.shape = {h - first + 1, x.shape[1], x.shape[2]};
    out.data.insert(out.data.end(), x.data.begin(), x.data.end());
  }
  return out;
}

template <class T>
bool same_bytes(const T& a, const T& b) {
  return std::memcmp(&a, &b, sizeof(T)) == 0;
}

TEST(SplitUnits, EvalHeadPerMethodInAnyOrderEqualsEvaluate) {
  const SyntheticDump d(tiny());
  const EvalShape s = shape_of(d);
  EvalOptions o;
  o.queries = parse_queries("last:48");
  const EvalResult whole = evaluate(s, loader(d), o);
  EvalResult r = eval_plan(s, o);
  const int64_t group = s.num_q_heads / s.num_kv_heads, M = r.methods.size();
  for (int64_t l = s.num_layers - 1; l >= 0; --l)
    for (int64_t g = s.num_kv_heads - 1; g >= 0; --g)
      for (int m = (int)M - 1; m >= 0; --m)
        eval_head(
            r, l, g, {m},
            {heads(d, l, Role::Q, g * group, group), d.read_head(l, Role::K, g), d.read_head(l, Role::V, g)},
            o);
  eval_finish(r);
  for (int64_t m = 0; m < M; ++m) {
    const MethodEval &a = whole.methods[m], &b = r.methods[m];
    EXPECT_TRUE(same_bytes(a.key, b.key)) << a.name;
    EXPECT_TRUE(same_bytes(a.value, b.value)) << a.name;
    EXPECT_TRUE(same_bytes(a.attn, b.attn)) << a.name;
    for (size_t l = 0; l < a.layers.size(); ++l)
      for (int64_t h = 0; h < s.num_q_heads; ++h)
        EXPECT_TRUE(same_bytes(a.layers[l].attn[h], b.layers[l].attn[h]))
            << a.name << " layer " << l << " head " << h;
  }
}

TEST(SplitUnits, HeadSensitivityEqualsChannelSensitivity) {
  const SyntheticDump d(tiny());
  const EvalShape s = shape_of(d);
  SensitivityOptions o;
  o.group = 64;
  o.sink = 16;
  o.queries = parse_queries("last:48");
  const SensitivityResult whole = channel_sensitivity(s, loader(d), o);
  const std::vector<int64_t> pos = select_queries(o.queries, s.tokens);
  const int64_t group = s.num_q_heads / s.num_kv_heads;
  std::vector<SensitivityRow> rows;
  for (int64_t l = 0; l < s.num_layers; ++l)
    for (int64_t g = 0; g < s.num_kv_heads; ++g)
      head_sensitivity(l, g, heads(d, l, Role::Q, g * group, group), d.read_head(l, Role::K, g), pos, o,
                       rows);
  ASSERT_EQ(rows.size(), whole.rows.size());
  for (size_t i = 0; i < rows.size(); ++i) EXPECT_TRUE(same_bytes(rows[i], whole.rows[i])) << "row " << i;
}

TEST(SplitUnits, SweepHeadsPerKvHeadEqualsBoostSweep) {
  const SyntheticDump d(tiny());
  const EvalShape s = shape_of(d);
  SweepOptions o;
  o.method = "kitty:group=64,sink=16";
  o.rates = {0, 0.125, 0.5};
  o.seeds = 2;
  const SweepResult whole = boost_sweep(s, loader(d), o);
  const SweepPlan plan = sweep_plan(s, o);
  std::vector<AttnStats> rows(plan.result.rows.size());
  const int64_t group = s.num_q_heads / s.num_kv_heads;
  for (int64_t l = 0; l < s.num_layers; ++l)
    for (int64_t g = 0; g < s.num_kv_heads; ++g) {
      const LayerQKV x{heads(d, l, Role::Q, g * group, group), d.read_head(l, Role::K, g),
                       d.read_head(l, Role::V, g)};
      const auto err = sweep_heads(plan, x, g, o);
      for (size_t i = 0; i < rows.size(); ++i)
        for (const AttnStats& a : err[i]) rows[i].merge(a);
    }
  for (size_t i = 0; i < rows.size(); ++i)
    EXPECT_TRUE(same_bytes(rows[i], whole.rows[i].attn)) << "row " << i;
}

// Without the head offset, the random selector of KV head 1 would draw head 0's channels.
TEST(SplitUnits, RandomChannelsFollowTheModelsHeadIndex) {
  Tensor keys;
  keys.shape = {2, 64, 16};
  keys.data.assign(2 * 64 * 16, 1.0f);
  const auto both = select_boost_channels(Selector::Random, keys, 64, 4, 7);
  Tensor one = keys;
  one.shape = {1, 64, 16};
  one.data.resize(64 * 16);
  const auto second = select_boost_channels(Selector::Random, one, 64, 4, 7, {}, 1);
  EXPECT_EQ(std::vector<int32_t>(both.begin() + 4, both.end()), second);
  EXPECT_NE(select_boost_channels(Selector::Random, one, 64, 4, 7), second);
}

}  // namespace
