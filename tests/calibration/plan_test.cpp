// kvlab plan's chooser (hand-checked knapsack), the plan file, the `plan` method and its decode
// rule (each layer's own).
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "../core/decode_check.h"
#include "kvlab/decode_view.h"
#include "kvlab/method.h"
#include "kvlab/plan.h"
#include "kvlab/synthetic_dump.h"

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
  p.layers = {{0, parse_method("kivi-2")->spec(), 2.4, 0.1}, {1, parse_method("int8")->spec(), 8.0, 0.01}};
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
