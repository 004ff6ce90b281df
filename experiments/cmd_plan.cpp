// kvlab plan DUMP --budget 3.0 [--candidates m1,m2,...] [--metric kl|score_mse|out_rel_err]
//            [--per-head] [--queries Q] [--threads N] --out PLAN.json
// Budgeted mixed precision (kvlab/plan.h): every candidate is evaluated on every layer of DUMP
// (the calibration dump), one method per layer (--per-head: per layer and KV head) is chosen to
// minimise the summed error within the mean-bits budget, and the plan is written;
// `kvlab eval OTHER.h5 --methods plan:file=PLAN.json` then measures it on other tokens.
#include <cstdio>
#include <memory>
#include <stdexcept>

#include "calibration_io.h"
#include "cli_options.h"
#include "common.h"
#include "kvlab/atomic_file.h"
#include "kvlab/evaluate.h"
#include "kvlab/method.h"
#include "kvlab/path_checks.h"
#include "kvlab/plan.h"

namespace kvlab::cli {
namespace {

struct PlanArgs {
  std::string dump, queries = "all", metric = "out_rel_err", out;
  std::vector<std::string> candidates;
  double budget = 3.0;
  int threads = 0;
  bool quiet = false, per_head = false;
};

double metric_of(const AttnStats& a, const std::string& metric) {
  if (metric == "score_mse") return a.score_mse();
  if (metric == "out_rel_err") return a.out_rel_err();
  return a.kl();
}

// The error of KV head g of a layer: its query heads' sums merged.
AttnStats kv_head_stats(const LayerEval& le, int64_t g, int64_t group) {
  AttnStats s;
  for (int64_t h = 0; h < group; ++h) s.merge(le.attn[g * group + h]);
  return s;
}

void run(const PlanArgs& a) {
  EvalOptions opt;
  for (const auto& item : a.candidates)
    for (auto& m : split_method_list(item)) opt.methods.push_back(m);
  if (opt.methods.empty()) opt.methods = default_plan_candidates();
  for (const std::string& m : opt.methods)
    if (parse_method(m)->family() == "plan")
      throw std::invalid_argument("--candidates '" + m + "': a plan cannot be a candidate");
  opt.queries = parse_queries(a.queries);
  opt.threads = a.threads;
  opt.topk = false;  // no plan metric reads it
  if (!a.quiet) opt.progress = calib::progress("plan");
  std::vector<NamedPath> inputs = dump_inputs(a.dump);
  for (const std::string& m : opt.methods)
    for (const std::string& file : parse_method(m)->files()) inputs.push_back({"--candidates", file});
  check_outputs_not_inputs({{"--out", a.out}}, inputs);

  const auto reader = open_dump_source(a.dump);
  const DumpInfo& info = reader->info();
  const EvalShape shape{info.num_layers, info.num_q_heads, info.num_kv_heads,      info.head_dim,
                        info.tokens,     info.rope_style,  (float)info.rope_theta, info.has_k_pre_rope};
  const bool pre_rope = info.has_k_pre_rope && eval_needs_k_pre_rope(opt.methods);
  const EvalResult r = evaluate(
      shape,
      [&](int64_t layer) {
        LayerQKV x = calib::loader(*reader, true)(layer);
        if (pre_rope) x.k_pre_rope = reader->read(layer, Role::KPreRope);
        return x;
      },
      opt);

  const size_t L = info.num_layers, M = r.methods.size();
  const int64_t H = info.num_kv_heads, group = info.num_q_heads / H;
  // the knapsack's units: layers, or (layer, KV head) in that order
  std::vector<std::vector<double>> unit_error(a.per_head ? L * H : L, std::vector<double>(M));
  std::vector<double> bits(M);
  for (size_t m = 0; m < M; ++m) {
    bits[m] = r.methods[m].bits.both();
    for (size_t l = 0; l < L; ++l) {
      const LayerEval& le = r.methods[m].layers[l];
      if (!a.per_head) unit_error[l][m] = metric_of(le.attn_total(), a.metric);
      for (int64_t g = 0; a.per_head && g < H; ++g)
        unit_error[l * H + g][m] = metric_of(kv_head_stats(le, g, group), a.metric);
    }
  }
  const std::vector<int> pick = choose_plan(unit_error, bits, a.budget);

  Plan p;
  p.budget = a.budget;
  p.metric = a.metric;
  p.calibration = "dump " + reader->path() + " (" + info.model + ", " + std::to_string(info.tokens) +
                  " tokens, queries " + to_string(r.queries) + ")";
  p.num_layers = L;
  p.num_kv_heads = info.num_kv_heads;
  p.head_dim = info.head_dim;
  p.tokens = info.tokens;
  p.per_head = a.per_head;
  double total = 0;
  for (const MethodEval& m : r.methods) p.candidates.push_back(m.spec);
  for (size_t u = 0; u < pick.size(); ++u) {
    p.bits += bits[pick[u]] / (double)pick.size();
    total += unit_error[u][pick[u]];
  }
  for (size_t l = 0; l < L; ++l) {
    if (!a.per_head) {
      p.layers.push_back({(int64_t)l, r.methods[pick[l]].spec, bits[pick[l]], unit_error[l][pick[l]], {}});
      continue;
    }
    PlanLayer pl{(int64_t)l, r.methods[pick[l * H]].spec, 0, 0, {}};
    for (int64_t g = 0; g < H; ++g) {
      const int m = pick[l * H + g];
      pl.heads.push_back({g, r.methods[m].spec, bits[m], unit_error[l * H + g][m]});
      if (r.methods[m].spec != pl.method) pl.method.clear();  // the heads differ
      pl.bits += bits[m] / (double)H;
      pl.error += unit_error[l * H + g][m];
    }
    p.layers.push_back(std::move(pl));
  }
  write_file_atomically(a.out, plan_to_json(p));

  std::vector<std::vector<std::string>> table{
      {"layer", a.per_head ? "methods per KV head" : "method", "bits/elem", a.metric}};
  for (const PlanLayer& l : p.layers) {
    std::string methods = l.method;
    if (a.per_head) {
      methods.clear();
      for (const PlanHead& h : l.heads) methods += (h.kv_head ? " | " : "") + h.method;
    }
    table.push_back({std::to_string(l.layer), methods, fixed(l.bits, 3), sci(l.error)});
  }
  print_table(table);
  std::printf(
      "\nplan: mean %.3f bits/elem (budget %.3f), summed %s %s\nuniform candidates on the same dump:\n",
      p.bits, a.budget, a.metric.c_str(), sci(total).c_str());
  std::vector<std::vector<std::string>> uni{{"method", "bits/elem", "summed " + a.metric}};
  for (size_t m = 0; m < M; ++m) {
    double s = 0;
    for (const std::vector<double>& e : unit_error) s += e[m];
    uni.push_back({r.methods[m].name, fixed(bits[m], 3), sci(s)});
  }
  print_table(uni);
  std::printf(
      "measured on %s; %.2f s; wrote %s (evaluate it on other tokens: kvlab eval OTHER --methods "
      "plan:file=%s)\n",
      p.calibration.c_str(), r.times.total, a.out.c_str(), a.out.c_str());
}

}  // namespace

static void add_plan(CLI::App& app) {
  auto a = std::make_shared<PlanArgs>();
  auto* c =
      app.add_subcommand("plan",
                         "Budgeted mixed precision: one method per layer, chosen on a calibration dump to "
                         "minimise attention error within a mean-bits budget; writes a plan file");
  add_dump_arg(c, a->dump, "calibration dump (file or synthetic:PRESET[:...]); evaluate the plan on another")
      ->required();
  c->add_option("--budget", a->budget, "mean bits per element allowed")
      ->check(real_range(0.0, 64.0, true))
      ->capture_default_str();
  c->add_option("--candidates", a->candidates,
                "methods to choose from, comma-separated (default: kivi and kitty at "
                "2-4 bits, boost 1/8-1/2, and int8)");
  c->add_option(
       "--metric", a->metric,
       "per-layer error summed over layers: out_rel_err (keys and values), kl or score_mse (keys only)")
      ->check(CLI::IsMember({"kl", "score_mse", "out_rel_err"}))
      ->capture_default_str();
  c->add_flag(
      "--per-head", a->per_head,
      "choose per (layer, KV head) instead of per layer: the same budget over more units (a version 2 "
      "plan file)");
  add_queries_option(c, a->queries);
  add_threads_option(c, a->threads);
  add_out_option(c, a->out, "the plan file (JSON, docs/FORMATS.md section 11)")->required();
  add_quiet_flag(c, a->quiet);
  c->callback([a] { run(*a); });
}

KVLAB_COMMAND(63, add_plan);

}  // namespace kvlab::cli
