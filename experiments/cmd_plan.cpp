// kvlab plan DUMP --budget 3.0 [--candidates m1,m2,...] [--metric kl|score_mse|out_rel_err]
//            [--queries Q] [--threads N] --out PLAN.json
// Budgeted mixed precision (kvlab/plan.h): every candidate is evaluated on every layer of DUMP
// (the calibration dump), one method per layer is chosen to minimise the summed error within the
// mean-bits budget, and the plan is written; `kvlab eval OTHER.h5 --methods plan:file=PLAN.json`
// then measures it on other tokens.
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
  bool quiet = false;
};

double metric_of(const AttnStats& a, const std::string& metric) {
  if (metric == "score_mse") return a.score_mse();
  if (metric == "out_rel_err") return a.out_rel_err();
  return a.kl();
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
  std::vector<std::vector<double>> error(L, std::vector<double>(M));
  std::vector<double> bits(M);
  for (size_t m = 0; m < M; ++m) {
    bits[m] = r.methods[m].bits.both();
    for (size_t l = 0; l < L; ++l) error[l][m] = metric_of(r.methods[m].layers[l].attn_total(), a.metric);
  }
  const std::vector<int> pick = choose_plan(error, bits, a.budget);

  Plan p;
  p.budget = a.budget;
  p.metric = a.metric;
  p.calibration = "dump " + reader->path() + " (" + info.model + ", " + std::to_string(info.tokens) +
                  " tokens, queries " + to_string(r.queries) + ")";
  p.num_layers = L;
  p.num_kv_heads = info.num_kv_heads;
  p.head_dim = info.head_dim;
  p.tokens = info.tokens;
  double total = 0;
  for (const MethodEval& m : r.methods) p.candidates.push_back(m.spec);
  for (size_t l = 0; l < L; ++l) {
    const MethodEval& m = r.methods[pick[l]];
    p.layers.push_back({(int64_t)l, m.spec, bits[pick[l]], error[l][pick[l]]});
    p.bits += bits[pick[l]] / (double)L;
    total += error[l][pick[l]];
  }
  write_file_atomically(a.out, plan_to_json(p));

  std::vector<std::vector<std::string>> table{{"layer", "method", "bits/elem", a.metric}};
  for (const PlanLayer& l : p.layers)
    table.push_back({std::to_string(l.layer), l.method, fixed(l.bits, 3), sci(l.error)});
  print_table(table);
  std::printf(
      "\nplan: mean %.3f bits/elem (budget %.3f), summed %s %s\nuniform candidates on the same dump:\n",
      p.bits, a.budget, a.metric.c_str(), sci(total).c_str());
  std::vector<std::vector<std::string>> uni{{"method", "bits/elem", "summed " + a.metric}};
  for (size_t m = 0; m < M; ++m) {
    double s = 0;
    for (size_t l = 0; l < L; ++l) s += error[l][m];
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
  add_queries_option(c, a->queries);
  add_threads_option(c, a->threads);
  add_out_option(c, a->out, "the plan file (JSON, docs/FORMATS.md section 11)")->required();
  add_quiet_flag(c, a->quiet);
  c->callback([a] { run(*a); });
}

KVLAB_COMMAND(63, add_plan);

}  // namespace kvlab::cli
