// JSON and CSV output of an evaluation: JSON parses (Python's json module) and follows
// docs/EVAL_JSON.md, numbers round-trip, strings are escaped; CSV has one row per level.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "../eval/eval_oracle.h"
#include "kvlab/eval_report.h"
#include "kvlab/evaluate.h"

namespace {

kvlab::EvalResult small_result() {
  const kvlab::EvalShape shape{2, 4, 2, 16, 96};
  std::vector<kvlab::LayerQKV> layers;
  for (uint32_t l = 0; l < 2; ++l)
    layers.push_back({evtest::normal({4, 96, 16}, 10 + l), evtest::keys({2, 96, 16}, 20 + l),
                      evtest::normal({2, 96, 16}, 30 + l)});
  kvlab::EvalOptions o;
  o.methods = {"kivi:kbits=2,vbits=2,group=32,residual=32", "fp16", "int8"};
  o.queries = kvlab::parse_queries("last:40");
  return kvlab::evaluate(
      shape, [&](int64_t l) { return layers[l]; }, o);
}

std::string python() {
  const char* env = std::getenv("KVLAB_PYTHON");
  return env && *env ? env : "/usr/bin/python3";
}

// Runs `script` with the JSON file as argv[1]; returns its exit status and output.
std::pair<int, std::string> run_python(const std::string& script, const std::string& json_path) {
  const std::string py =
      (std::filesystem::temp_directory_path() / ("kvlab_eval_check_" + std::to_string(getpid()) + ".py"))
          .string();
  std::ofstream(py) << script;
  const std::string cmd = python() + " " + py + " " + json_path + " 2>&1";
  std::string out;
  FILE* p = popen(cmd.c_str(), "r");
  char buf[512];
  while (p && fgets(buf, sizeof buf, p)) out += buf;
  const int status = p ? pclose(p) : -1;
  std::remove(py.c_str());
  return {status, out};
}

TEST(EvalReport, JsonParsesAndFollowsTheSchema) {
  if (!std::filesystem::exists(python())) GTEST_SKIP() << "no python at " << python();
  const kvlab::EvalResult r = small_result();
  const std::string path =
      (std::filesystem::temp_directory_path() / ("kvlab_eval_" + std::to_string(getpid()) + ".json"))
          .string();
  {
    std::ofstream f(path);
    kvlab::write_eval_json(f, r, {"dir/with \"quotes\"\\and\ttab.h5", "model\nname"});
  }
  // Every required field, per method, layer and head; values checked against the C++ side below.
  const std::string script = R"PY(
import json, math, sys
d = json.load(open(sys.argv[1]))
assert d["schema"] == "kvlab-eval/1"
assert d["dump"]["path"] == 'dir/with "quotes"\\and\ttab.h5', d["dump"]["path"]
assert d["dump"]["model"] == "model\nname"
assert d["dump"]["num_layers"] == 2 and d["dump"]["tokens"] == 96
assert d["queries"] == {"selection": "last:40", "count": 40}
assert d["layer_range"] == [0, 1]
fields = ["bits_per_element", "key_bits_per_element", "value_bits_per_element", "key_mse", "key_max_abs",
          "value_mse", "value_max_abs", "attn_score_mse", "attn_output_rel_err", "kl", "topk_overlap"]
ms = d["methods"]
assert [m["name"] for m in ms] == ["kivi:kbits=2,vbits=2,group=32,residual=32", "int8", "fp16"], [m["name"] for m in ms]
bits = [m["bits_per_element"] for m in ms]
assert bits == sorted(bits)
for m in ms:
    assert m["spec"].startswith(m["name"].split(":")[0])
    for f in fields: assert isinstance(m[f], float) or isinstance(m[f], int), (m["name"], f)
    assert len(m["layers"]) == 2
    for li, l in enumerate(m["layers"]):
        assert l["layer"] == li
        for f in fields: assert f in l
        assert len(l["heads"]) == 4
        for h, e in enumerate(l["heads"]):
            assert e["q_head"] == h and e["kv_head"] == h // 2
            for f in fields: assert f in e
    # The pooled rule of EVAL_JSON.md, recomputed from the per-layer entries is not possible for
    # rel err without the norms; check score MSE (all layers have equal entry counts).
    mean = sum(l["attn_score_mse"] for l in m["layers"]) / 2
    assert math.isclose(mean, m["attn_score_mse"], rel_tol=1e-12), (mean, m["attn_score_mse"])
print(repr(ms[0]["kl"]), repr(ms[0]["attn_score_mse"]))
)PY";
  const auto [status, out] = run_python(script, path);
  std::remove(path.c_str());
  ASSERT_EQ(status, 0) << out;
  // Full precision: Python reads back the very doubles (repr is the shortest round trip).
  const kvlab::MethodEval* kivi = kvlab::methods_by_bits(r)[0];
  std::istringstream is(out);
  double kl = 0, se = 0;
  is >> kl >> se;
  EXPECT_EQ(kl, kivi->attn.kl());
  EXPECT_EQ(se, kivi->attn.score_mse());
}

TEST(EvalReport, CsvHasOneRowPerMethodLayerAndHead) {
  const kvlab::EvalResult r = small_result();
  std::ostringstream os;
  kvlab::write_eval_csv(os, r);
  std::istringstream is(os.str());
  std::string line;
  std::getline(is, line);
  EXPECT_EQ(
      line,
      "method,spec,layer,q_head,kv_head,bits_per_element,key_bits_per_element,value_bits_per_element,key_mse,"
      "key_max_abs,value_mse,value_max_abs,attn_score_mse,attn_output_rel_err,kl,topk_overlap");
  int rows = 0, method_rows = 0;
  while (std::getline(is, line)) {
    ++rows;
    if (line.find(",all,all,all,") != std::string::npos) ++method_rows;
  }
  EXPECT_EQ(rows, 3 * (1 + 2 * (1 + 4)));
  EXPECT_EQ(method_rows, 3);
  // A spec with commas is quoted.
  EXPECT_NE(os.str().find("\"kivi:kbits=2,vbits=2,group=32,residual=32\","), std::string::npos);
}

}  // namespace
