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
  if (M > 255) throw std::invalid_argument("plan: " + std::to_string(M) + " candidates (at most 255)");
  std::vector<int64_t> cost(M);
  int64_t cheapest = std::numeric_limits<int64_t>::max(), dearest = 0;
  for (size_t m = 0; m < M; ++m) {
    if (!(bits[m] > 0 && std::isfinite(bits[m])))
      throw std::invalid_argument("plan: candidate bits must be > 0");
    cost[m] = (int64_t)std::ceil(bits[m] * 1e3 - 1e-6);
    cheapest = std::min(cheapest, cost[m]);
    dearest = std::max(dearest, cost[m]);
  }
  for (const auto& row : error) {
    if (row.size() != M) throw std::invalid_argument("plan: one error per candidate and layer");
    for (double e : row)
      if (!std::isfinite(e))
        throw std::invalid_argument("plan: a measured error is not finite (choose another --metric)");
  }
  const int64_t cap_all = (int64_t)std::floor(budget * 1e3 * (double)L + 1e-6);
  if (cheapest * (int64_t)L > cap_all)
    throw std::invalid_argument("plan: budget " + text::format_double(budget) +
                                " bits is below the cheapest candidate's " +
                                text::format_double((double)cheapest / 1e3));
  // Every unit spends at least `cheapest`: count only what lies above it (the same sums, shifted,
  // so the same choices), and no more than every unit's dearest choice can spend.
  for (int64_t& c : cost) c -= cheapest;
  const int64_t cap = std::min(cap_all - cheapest * (int64_t)L, (dearest - cheapest) * (int64_t)L);
  if ((double)(cap + 1) * (double)L > (double)(1 << 27))
    throw std::invalid_argument("plan: the knapsack over " + std::to_string(L) + " units would need " +
                                std::to_string(cap + 1) +
                                " bit steps each; lower the budget, or plan per layer");
  // best[c]: least error of the units so far spending exactly c steps above the cheapest;
  // pick[l][c] its choice.
  const double inf = std::numeric_limits<double>::infinity();
  std::vector<double> best(cap + 1, inf), next(cap + 1);
  std::vector<std::vector<uint8_t>> pick(L, std::vector<uint8_t>(cap + 1, 0));
  best[0] = 0;
  for (size_t l = 0; l < L; ++l) {
    std::fill(next.begin(), next.end(), inf);
    for (int64_t c = 0; c <= cap; ++c) {
      if (best[c] == inf) continue;
      for (size_t m = 0; m < M; ++m) {
        const int64_t n = c + cost[m];
        if (n > cap) continue;
        const double e = best[c] + error[l][m];
        if (e < next[n]) next[n] = e, pick[l][n] = (uint8_t)m;  // the first candidate wins a tie
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
  j["version"] = p.per_head ? 2 : 1;  // per-layer plans stay version 1, readable by older kvlab
  if (p.per_head) j["granularity"] = "head";
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
  for (const PlanLayer& l : p.layers) {
    json o = {{"layer", l.layer}, {"method", l.method}, {"bits", l.bits}, {"error", l.error}};
    if (p.per_head) {
      o["heads"] = json::array();
      for (const PlanHead& h : l.heads)
        o["heads"].push_back(
            {{"kv_head", h.kv_head}, {"method", h.method}, {"bits", h.bits}, {"error", h.error}});
    }
    j["layers"].push_back(o);
  }
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
    if (!j.is_object() || j.value("format", "") != "kvlab-plan" ||
        (j.value("version", 0) != 1 && j.value("version", 0) != 2))
      throw fail("not a kvlab plan (format \"kvlab-plan\", version 1 or 2)");
    Plan p;
    p.per_head = j.at("version").get<int>() == 2;
    if (p.per_head && j.value("granularity", "") != "head")
      throw fail("version 2 needs \"granularity\": \"head\"");
    p.budget = j.at("budget").get<double>();
    p.bits = j.at("bits").get<double>();
    p.metric = j.at("metric").get<std::string>();
    p.calibration = j.at("calibration").get<std::string>();
    p.num_layers = j.at("num_layers").get<int64_t>();
    p.num_kv_heads = j.at("num_kv_heads").get<int64_t>();
    p.head_dim = j.at("head_dim").get<int64_t>();
    p.tokens = j.at("tokens").get<int64_t>();
    p.candidates = j.at("candidates").get<std::vector<std::string>>();
    for (const json& l : j.at("layers")) {
      p.layers.push_back({l.at("layer").get<int64_t>(),
                          l.at("method").get<std::string>(),
                          l.at("bits").get<double>(),
                          l.at("error").get<double>(),
                          {}});
      if (!p.per_head) continue;
      for (const json& h : l.at("heads"))
        p.layers.back().heads.push_back({h.at("kv_head").get<int64_t>(), h.at("method").get<std::string>(),
                                         h.at("bits").get<double>(), h.at("error").get<double>()});
    }
    if (p.num_layers < 1 || (int64_t)p.layers.size() != p.num_layers)
      throw fail("num_layers " + std::to_string(p.num_layers) + " but " + std::to_string(p.layers.size()) +
                 " layers");
    for (int64_t l = 0; l < p.num_layers; ++l) {
      const PlanLayer& pl = p.layers[l];
      const std::string at = "layers[" + std::to_string(l) + "]";
      if (pl.layer != l) throw fail(at + ".layer is " + std::to_string(pl.layer));
      if (!p.per_head) continue;
      if ((int64_t)pl.heads.size() != p.num_kv_heads)
        throw fail("num_kv_heads " + std::to_string(p.num_kv_heads) + " but " + at + " has " +
                   std::to_string(pl.heads.size()) + " heads");
      for (int64_t g = 0; g < p.num_kv_heads; ++g)
        if (pl.heads[g].kv_head != g)
          throw fail(at + ".heads[" + std::to_string(g) + "].kv_head is " +
                     std::to_string(pl.heads[g].kv_head));
    }
    return p;
  } catch (const json::exception& e) {
    throw fail(std::string("missing or mistyped field: ") + e.what());
  }
}

}  // namespace kvlab
