// The plan chooser (a multiple-choice knapsack over layers) and the plan file.
#include "kvlab/plan.h"

#include <cmath>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>

#include "kvlab/kv_text.h"

namespace kvlab {

using nlohmann::json;

const std::vector<std::string>& default_plan_candidates() {
  static const std::vector<std::string> c = {"kivi-2",
                                             "kitty",
                                             "kitty-pro",
                                             "kitty:boost=0.5",
                                             "kivi:kbits=3,vbits=3",
                                             "kivi:kbits=4,vbits=2",
                                             "kivi:kbits=2,vbits=4",
                                             "kivi-4",
                                             "int8"};
  return c;
}

std::vector<int> choose_plan(const std::vector<std::vector<double>>& error, const std::vector<double>& bits,
                             double budget) {
  const size_t L = error.size(), M = bits.size();
  if (L == 0 || M == 0) throw std::invalid_argument("plan: no layers or no candidates");
  std::vector<int64_t> cost(M);
  int64_t cheapest = std::numeric_limits<int64_t>::max();
  for (size_t m = 0; m < M; ++m) {
    if (!(bits[m] > 0 && std::isfinite(bits[m])))
      throw std::invalid_argument("plan: candidate bits must be > 0");
    cost[m] = (int64_t)std::ceil(bits[m] * 1e3 - 1e-6);
    cheapest = std::min(cheapest, cost[m]);
  }
  for (const auto& row : error) {
    if (row.size() != M) throw std::invalid_argument("plan: one error per candidate and layer");
    for (double e : row)
      if (!std::isfinite(e))
        throw std::invalid_argument("plan: a measured error is not finite (choose another --metric)");
  }
  const int64_t cap = (int64_t)std::floor(budget * 1e3 * (double)L + 1e-6);
  if (cheapest * (int64_t)L > cap)
    throw std::invalid_argument("plan: budget " + text::format_double(budget) +
                                " bits is below the cheapest candidate's " +
                                text::format_double((double)cheapest / 1e3));
  // best[c]: least error of the layers so far spending exactly c units; pick[l][c] its choice.
  const double inf = std::numeric_limits<double>::infinity();
  std::vector<double> best(cap + 1, inf), next(cap + 1);
  std::vector<std::vector<int>> pick(L, std::vector<int>(cap + 1, -1));
  best[0] = 0;
  for (size_t l = 0; l < L; ++l) {
    std::fill(next.begin(), next.end(), inf);
    for (int64_t c = 0; c <= cap; ++c) {
      if (best[c] == inf) continue;
      for (size_t m = 0; m < M; ++m) {
        const int64_t n = c + cost[m];
        if (n > cap) continue;
        const double e = best[c] + error[l][m];
        if (e < next[n]) next[n] = e, pick[l][n] = (int)m;  // the first candidate wins a tie
      }
    }
    best.swap(next);
  }
  int64_t c = 0;
  for (int64_t x = 1; x <= cap; ++x)
    if (best[x] < best[c]) c = x;
  std::vector<int> out(L);
  for (size_t l = L; l-- > 0;) {
    out[l] = pick[l][c];
    c -= cost[out[l]];
  }
  return out;
}

std::string plan_to_json(const Plan& p) {
  json j;
  j["format"] = "kvlab-plan";
  j["version"] = 1;
  j["budget"] = p.budget;
  j["bits"] = p.bits;
  j["metric"] = p.metric;
  j["calibration"] = p.calibration;
  j["num_layers"] = p.num_layers;
  j["num_kv_heads"] = p.num_kv_heads;
  j["head_dim"] = p.head_dim;
  j["tokens"] = p.tokens;
  j["candidates"] = p.candidates;
  j["layers"] = json::array();
  for (const PlanLayer& l : p.layers)
    j["layers"].push_back({{"layer", l.layer}, {"method", l.method}, {"bits", l.bits}, {"error", l.error}});
  return j.dump(2) + "\n";
}

Plan read_plan_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("plan file '" + path + "': cannot be opened");
  std::string text(1 << 20, '\0');  // a plan of thousands of layers is far below 1 MiB
  in.read(text.data(), (std::streamsize)text.size());
  text.resize((size_t)in.gcount());
  if (!in.eof() && in.peek() != EOF) throw std::runtime_error("plan file '" + path + "': larger than 1 MiB");
  const auto fail = [&](const std::string& why) {
    return std::runtime_error("plan file '" + path + "': " + why);
  };
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    throw fail(std::string("not JSON: ") + e.what());
  }
  try {
    if (!j.is_object() || j.value("format", "") != "kvlab-plan" || j.value("version", 0) != 1)
      throw fail("not a kvlab plan (format \"kvlab-plan\", version 1)");
    Plan p;
    p.budget = j.at("budget").get<double>();
    p.bits = j.at("bits").get<double>();
    p.metric = j.at("metric").get<std::string>();
    p.calibration = j.at("calibration").get<std::string>();
    p.num_layers = j.at("num_layers").get<int64_t>();
    p.num_kv_heads = j.at("num_kv_heads").get<int64_t>();
    p.head_dim = j.at("head_dim").get<int64_t>();
    p.tokens = j.at("tokens").get<int64_t>();
    p.candidates = j.at("candidates").get<std::vector<std::string>>();
    for (const json& l : j.at("layers"))
      p.layers.push_back({l.at("layer").get<int64_t>(), l.at("method").get<std::string>(),
                          l.at("bits").get<double>(), l.at("error").get<double>()});
    if (p.num_layers < 1 || (int64_t)p.layers.size() != p.num_layers)
      throw fail("num_layers " + std::to_string(p.num_layers) + " but " + std::to_string(p.layers.size()) +
                 " layers");
    for (int64_t l = 0; l < p.num_layers; ++l)
      if (p.layers[l].layer != l)
        throw fail("layers[" + std::to_string(l) + "].layer is " + std::to_string(p.layers[l].layer));
    return p;
  } catch (const json::exception& e) {
    throw fail(std::string("missing or mistyped field: ") + e.what());
  }
}

}  // namespace kvlab
