// kvlab plan's chooser (hand-checked knapsack), the plan file, the `plan` method and its decode
// rule (each layer's own; in a per-head plan, each KV head's own).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <stdexcept>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "../core/decode_check.h"
#include "kvlab/decode_view.h"
#include "kvlab/dump.h"
#include "kvlab/method.h"
#include "kvlab/plan.h"
#include "kvlab/synthetic_dump.h"
#include "kvlab/vq_method.h"

namespace {

using namespace kvlab;

TEST(Plan, ChoosesLeastErrorWithinTheBudget) {
  // Two layers, candidates of 2 and 4 bits: spending the 4 bits on layer 0 gains most.
  const std::vector<std::vector<double>> err = {{10, 1}, {3, 2}};
  EXPECT_EQ(choose_plan(err, {2, 4}, 3.0), (std::vector<int>{1, 0}));  // 1 + 3, mean 3 bits
  EXPECT_EQ(choose_plan(err, {2, 4}, 2.0), (std::vector<int>{0, 0}));
  EXPECT_EQ(choose_plan(err, {2, 4}, 4.0), (std::vector<int>{1, 1}));
  EXPECT_EQ(choose_plan(err, {2, 4}, 3.999), (std::vector<int>{1, 0}));
  EXPECT_THROW(choose_plan(err, {2, 4}, 1.9), std::invalid_argument);  // below the cheapest
  EXPECT_THROW(choose_plan({{1, 2}, {3}}, {2, 4}, 3.0), std::invalid_argument);
  EXPECT_THROW(choose_plan({{1, NAN}}, {2, 4}, 3.0), std::invalid_argument);
  // Three candidates, three layers, checked against all 27 choices by hand: budget 3 allows
  // 9 bits in all; 4 + 3 + 2 bits give 1 + 2 + 6 = 9, the least (3 + 3 + 3 gives 11).
  const std::vector<std::vector<double>> e3 = {{9, 5, 1}, {7, 2, 1.5}, {6, 4, 3}};
  EXPECT_EQ(choose_plan(e3, {2, 3, 4}, 3.0), (std::vector<int>{2, 1, 0}));
}

std::string write(const std::string& name, const std::string& text) {
  std::string path = testing::TempDir();
  path.append(name);
  std::ofstream(path) << text;
  return path;
}

Plan two_layers() {
  Plan p;
  p.budget = 5;
  p.bits = 5.2;
  p.metric = "kl";
  p.calibration = "dump test";
  p.num_layers = 2;
  p.num_kv_heads = 2;
  p.head_dim = 16;
  p.tokens = 256;
  p.candidates = {"kivi-2", "int8"};
  p.layers = {{0, parse_method("kivi-2")->spec(), 2.4, 0.1, {}},
              {1, parse_method("int8")->spec(), 8.0, 0.01, {}}};
  return p;
}

TEST(Plan, FileRoundTripAndMethodAppliesEachLayersChoice) {
  register_plan_method();
  const std::string path = write("plan.json", plan_to_json(two_layers()));
  const Plan back = read_plan_file(path);
  EXPECT_EQ(back.layers[1].method, two_layers().layers[1].method);
  EXPECT_EQ(back.candidates, two_layers().candidates);
  EXPECT_DOUBLE_EQ(back.bits, 5.2);

  const MethodPtr m = parse_method("plan:file=" + path);
  EXPECT_EQ(m->spec(), "plan:file=" + path);
  EXPECT_TRUE(*parse_method(m->spec()) == *m);
  EXPECT_EQ(m->files(), std::vector<std::string>{path});
  EXPECT_NO_THROW(m->check_model({2, 2, 16}));
  EXPECT_THROW(m->check_model({3, 2, 16}), std::invalid_argument);
  const MethodPtr kivi = parse_method("kivi-2"), int8 = parse_method("int8");
  EXPECT_DOUBLE_EQ(m->bits(256, 16).key, (kivi->bits(256, 16).key + int8->bits(256, 16).key) / 2);
  const SyntheticDump d(synthetic_preset("tiny"));
  const Tensor k = d.read_head(0, Role::K, 0), v = d.read_head(0, Role::V, 0);
  EXPECT_EQ(m->apply(k.view(), v.view(), {0, 0}).k.data, kivi->apply(k.view(), v.view(), {0, 0}).k.data);
  EXPECT_EQ(m->apply(k.view(), v.view(), {1, 0}).k.data, int8->apply(k.view(), v.view(), {1, 0}).k.data);
  EXPECT_THROW(m->apply(k.view(), v.view(), {2, 0}), std::invalid_argument);
  // the quantized range common to both layers: kivi-2's
  EXPECT_EQ(m->schedule(256).key_end, kivi->schedule(256).key_end);
}

// Per-head plans (version 2): layer 0's KV heads use kivi-2 and int8, layer 1's both kivi-4.
Plan per_head() {
  Plan p = two_layers();
  p.per_head = true;
  const std::string kivi2 = parse_method("kivi-2")->spec(), int8 = parse_method("int8")->spec(),
                    kivi4 = parse_method("kivi-4")->spec();
  p.layers[0] = {0, "", 5.2, 0.2, {{0, kivi2, 2.4, 0.15}, {1, int8, 8.0, 0.05}}};
  p.layers[1] = {1, kivi4, 4.4, 0.02, {{0, kivi4, 4.4, 0.01}, {1, kivi4, 4.4, 0.01}}};
  return p;
}

TEST(Plan, PerHeadFileRoundTripAndMethodAppliesEachHeadsChoice) {
  register_plan_method();
  const std::string text = plan_to_json(per_head());
  EXPECT_NE(text.find("\"version\": 2"), std::string::npos);
  EXPECT_NE(text.find("\"granularity\": \"head\""), std::string::npos);
  EXPECT_EQ(plan_to_json(two_layers()).find("granularity"), std::string::npos);  // per-layer: version 1
  const std::string path = write("plan_heads.json", text);
  const Plan back = read_plan_file(path);
  ASSERT_TRUE(back.per_head);
  ASSERT_EQ(back.layers[0].heads.size(), 2u);
  EXPECT_EQ(back.layers[0].heads[1].method, parse_method("int8")->spec());
  EXPECT_DOUBLE_EQ(back.layers[0].heads[0].error, 0.15);

  const MethodPtr m = parse_method("plan:file=" + path);
  const MethodPtr kivi2 = parse_method("kivi-2"), int8 = parse_method("int8"), kivi4 = parse_method("kivi-4");
  const SyntheticDump d(synthetic_preset("tiny"));
  for (int64_t g = 0; g < 2; ++g) {
    const Tensor k = d.read_head(0, Role::K, g), v = d.read_head(0, Role::V, g);
    const Method& want0 = g == 0 ? *kivi2 : *int8;
    EXPECT_EQ(m->apply(k.view(), v.view(), {0, g}).k.data, want0.apply(k.view(), v.view(), {0, g}).k.data);
    EXPECT_EQ(m->apply(k.view(), v.view(), {0, g}).v.data, want0.apply(k.view(), v.view(), {0, g}).v.data);
    EXPECT_EQ(m->apply(k.view(), v.view(), {1, g}).k.data, kivi4->apply(k.view(), v.view(), {1, g}).k.data);
  }
  const Tensor k = d.read_head(0, Role::K, 0), v = d.read_head(0, Role::V, 0);
  EXPECT_THROW(m->apply(k.view(), v.view(), {0, 2}), std::invalid_argument);  // no KV head 2
  // bits: the mean over the four (layer, head) units
  const double want =
      (kivi2->bits(256, 16).both() + int8->bits(256, 16).both() + 2 * kivi4->bits(256, 16).both()) / 4;
  EXPECT_NEAR(m->bits(256, 16).both(), want, 1e-12);
  EXPECT_NE(m->calibration().find("per-head"), std::string::npos);
  // the files of methods inside a mixed layer count as inputs too (a kvquant calibration dump)
  register_vq_method();
  SyntheticDumpParams sp = synthetic_preset("tiny");
  sp.k_pre_rope = true;
  const SyntheticDump src(sp);
  const std::string calib = testing::TempDir() + "plan_heads_calib.h5";
  {
    DumpWriter w(calib, src.info());
    for (int64_t l = 0; l < src.info().num_layers; ++l)
      for (Role r : {Role::Q, Role::K, Role::V, Role::KPreRope}) w.write(l, r, src.read(l, r).view());
    w.commit();
  }
  Plan with_kvquant = per_head();
  with_kvquant.layers[0].heads[1].method = "kvquant:bits=3,calib=dump:" + calib;
  const std::string kq_path = write("plan_heads_kvquant.json", plan_to_json(with_kvquant));
  const MethodPtr mk = parse_method("plan:file=" + kq_path);
  EXPECT_EQ(mk->files(), (std::vector<std::string>{kq_path, calib}));
  EXPECT_TRUE(mk->needs_k_pre_rope());

  // version 2 without its heads, with a head missing or out of order: named errors
  Plan no_heads = per_head();
  no_heads.layers[1].heads.clear();
  Plan swapped = per_head();
  std::swap(swapped.layers[0].heads[0], swapped.layers[0].heads[1]);
  std::string no_granularity = text;
  no_granularity.replace(no_granularity.find("\"granularity\""), 13, "\"grain\"");
  for (const auto& [name, body, needle] :
       {std::tuple<std::string, std::string, std::string>{"h1.json", plan_to_json(no_heads), "has 0 heads"},
        {"h2.json", plan_to_json(swapped), "heads[0].kv_head is 1"},
        {"h3.json", no_granularity, "granularity"}}) {
    const std::string bad = write(name, body);
    try {
      parse_method("plan:file=" + bad);
      ADD_FAILURE() << name;
    } catch (const std::exception& e) {
      EXPECT_NE(std::string(e.what()).find(bad), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  }
}

TEST(Plan, ChooserOverManyUnitsAndItsSizeLimit) {
  // 12 units (6 layers x 2 KV heads), 3 candidates: the least error per unit within the mean.
  std::vector<std::vector<double>> err(12);
  for (int u = 0; u < 12; ++u) err[u] = {10.0 + u, 5.0 + u * 0.1, 1.0};  // 4 bits help the later units most
  const std::vector<int> pick = choose_plan(err, {2, 3, 4}, 3.0);
  double bits = 0;
  for (int c : pick) bits += 2 + c;
  EXPECT_LE(bits / 12, 3.0);
  // brute force over the 3^12 choices
  double best = 1e300;
  for (int code = 0; code < 531441; ++code) {
    double e = 0, b = 0;
    for (int u = 0, c = code; u < 12; ++u, c /= 3) e += err[u][c % 3], b += 2 + c % 3;
    if (b <= 36 && e < best) best = e;
  }
  double got = 0;
  for (int u = 0; u < 12; ++u) got += err[u][pick[u]];
  EXPECT_DOUBLE_EQ(got, best);
  // a table too large to hold is refused, not allocated
  const std::vector<std::vector<double>> many(100000, std::vector<double>{1.0, 0.5});
  EXPECT_THROW(choose_plan(many, {2, 16}, 15.0), std::invalid_argument);
  EXPECT_THROW(choose_plan({std::vector<double>(256, 1.0)}, std::vector<double>(256, 2.0), 3.0),
               std::invalid_argument);
}

// Decoding: each layer streams by its own method's rule (a plan has no one rule), tested like
// every family against each step's own prefix, bit for bit; a layer whose method cannot stream
// makes the plan refused, naming the layer.
TEST(Plan, DecodesEachLayerByItsOwnRule) {
  register_plan_method();
  Plan p = two_layers();
  p.layers = {{0, parse_method("kivi:group=4,residual=4,sink=1")->spec(), 3.0, 0.1},
              {1, parse_method("int8:group=4")->spec(), 8.0, 0.01}};
  const MethodPtr m = parse_method("plan:file=" + write("plan_decode.json", plan_to_json(p)));
  EXPECT_NO_THROW(check_decodable(*m));
  EXPECT_THROW(m->decode_schedule(5), std::invalid_argument);  // ask the layer
  EXPECT_THROW(layer_method(*m, 2), std::invalid_argument);
  const MethodPtr kivi = parse_method(p.layers[0].method), int8 = parse_method(p.layers[1].method);
  // hand-checked at step t = 5 (6 tokens): kivi keys fqqqqf, values fqffff; int8 both qqqqff
  const Schedule s0 = layer_method(*m, 0).decode_schedule(6), s1 = layer_method(*m, 1).decode_schedule(6);
  EXPECT_EQ(kvtest::marks(s0.key_begin, s0.key_end, 5), "fqqqqf");
  EXPECT_EQ(kvtest::marks(s0.value_begin, s0.value_end, 5), "fqffff");
  EXPECT_EQ(kvtest::marks(s1.key_begin, s1.key_end, 5), "qqqqff");
  EXPECT_EQ(kvtest::marks(s1.value_begin, s1.value_end, 5), "qqqqff");
  const SyntheticDump d(synthetic_preset("tiny"));
  for (int64_t l = 0; l < 2; ++l) {
    SCOPED_TRACE("layer " + std::to_string(l));
    const int64_t D = d.info().head_dim, T = 24;
    const Tensor K = d.read_head(l, Role::K, 0), V = d.read_head(l, Role::V, 0);
    const Tensor k{{1, T, D}, std::vector<float>(K.data.begin(), K.data.begin() + T * D)},
        v{{1, T, D}, std::vector<float>(V.data.begin(), V.data.begin() + T * D)};
    kvtest::check_streaming(*m, k, v, {l, 0});
    // the layer's view is its own method's, bit for bit
    const Method& own = l == 0 ? *kivi : *int8;
    EXPECT_EQ(decode_view(*m, k.view(), v.view(), 9, {l, 0}).k.data,
              decode_view(own, k.view(), v.view(), 9).k.data);
  }
  Plan refused = p;
  refused.layers[1].method = parse_method("int8")->spec();  // group=all: not causal
  try {
    check_decodable(*parse_method("plan:file=" + write("plan_refused.json", plan_to_json(refused))));
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("layer 1"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("group=all"), std::string::npos) << e.what();
  }
}

// A per-head plan whose heads differ within a layer: each KV head streams by its own method's
// rule (docs/FORMATS.md section 12), hand-checked and checked against each step's own prefix.
TEST(Plan, PerHeadMixedLayerDecodesEachHeadByItsOwnRule) {
  register_plan_method();
  Plan p = per_head();
  const std::string kivi = parse_method("kivi:group=4,residual=4,sink=1")->spec(),
                    int8 = parse_method("int8:group=4")->spec();
  p.layers[0].heads = {{0, kivi, 3.0, 0.1}, {1, int8, 8.0, 0.01}};
  p.layers[1] = {1, int8, 8.0, 0.02, {{0, int8, 8.0, 0.01}, {1, int8, 8.0, 0.01}}};
  const MethodPtr m = parse_method("plan:file=" + write("plan_heads_decode.json", plan_to_json(p)));
  EXPECT_NO_THROW(check_decodable(*m));
  EXPECT_THROW(layer_method(*m, 0).decode_schedule(5), std::invalid_argument);  // ask the head
  EXPECT_THROW(head_method(*m, 0, 2), std::invalid_argument);
  EXPECT_EQ(&head_method(*m, 1, 1), &layer_method(*m, 1));  // heads that agree: the layer's method
  // hand-checked at step t = 5 (6 tokens): head 0 (kivi) keys fqqqqf, values fqffff; head 1 (int8) qqqqff
  const Schedule s0 = head_method(*m, 0, 0).decode_schedule(6), s1 = head_method(*m, 0, 1).decode_schedule(6);
  EXPECT_EQ(kvtest::marks(s0.key_begin, s0.key_end, 5), "fqqqqf");
  EXPECT_EQ(kvtest::marks(s0.value_begin, s0.value_end, 5), "fqffff");
  EXPECT_EQ(kvtest::marks(s1.key_begin, s1.key_end, 5), "qqqqff");
  EXPECT_EQ(kvtest::marks(s1.value_begin, s1.value_end, 5), "qqqqff");
  const SyntheticDump d(synthetic_preset("tiny"));
  const int64_t D = d.info().head_dim, T = 24;
  for (int64_t g = 0; g < 2; ++g) {
    SCOPED_TRACE("KV head " + std::to_string(g));
    const Tensor K = d.read_head(0, Role::K, g), V = d.read_head(0, Role::V, g);
    const Tensor k{{1, T, D}, std::vector<float>(K.data.begin(), K.data.begin() + T * D)},
        v{{1, T, D}, std::vector<float>(V.data.begin(), V.data.begin() + T * D)};
    kvtest::check_streaming(*m, k, v, {0, g});
    const MethodPtr own = parse_method(g == 0 ? kivi : int8);
    const Reconstruction a = decode_view(*m, k.view(), v.view(), 9, {0, g}),
                         b = decode_view(*own, k.view(), v.view(), 9);
    EXPECT_EQ(a.k.data, b.k.data);
    EXPECT_EQ(a.v.data, b.v.data);
  }
  Plan refused = p;
  refused.layers[0].heads[1].method = parse_method("int8")->spec();  // group=all: not causal
  try {
    check_decodable(*parse_method("plan:file=" + write("plan_heads_refused.json", plan_to_json(refused))));
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("layer 0: KV head 1"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("group=all"), std::string::npos) << e.what();
  }
}

TEST(Plan, BadFilesAreRefusedNamingTheFile) {
  register_plan_method();
  Plan short_plan = two_layers();
  short_plan.layers.pop_back();
  Plan nested = two_layers();
  nested.layers[0].method = "plan:file=x.json";
  const std::string bad[] = {write("p1.json", "not json"), write("p2.json", "{\"format\": \"other\"}"),
                             write("p3.json", "{\"format\": \"kvlab-plan\", \"version\": 1}"),
                             write("p4.json", plan_to_json(short_plan)),
                             write("p5.json", plan_to_json(nested))};
  for (const std::string& path : bad) {
    try {
      parse_method("plan:file=" + path);
      ADD_FAILURE() << path;
    } catch (const std::exception& e) {
      EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
    }
  }
  EXPECT_ANY_THROW(parse_method("plan:file=/nonexistent/plan.json"));
  EXPECT_ANY_THROW(parse_method("plan:path=x"));
}

}  // namespace
