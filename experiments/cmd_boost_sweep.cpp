// kvlab boost-sweep [DUMP] [--method kitty] [--rates 0,0.0625,0.125,0.25,0.5,1]
//                   [--selectors magnitude,random,variance,oracle] [--seeds 5] [--calib-tokens N]
//                   [--queries last:N] [--layers a-b] [--threads N] [--device cpu|cuda [--share-gpu]] --out
//                   SWEEP.csv
// Kitty at each boost rate with each channel selector (kvlab/boost_sweep.h). Writes SWEEP.csv
// (one row per selector, rate and seed), SWEEP_summary.csv (mean and spread over seeds),
// SWEEP_score_mse.svg and SWEEP_output_err.svg.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

#include "calibration_io.h"
#include "cli_options.h"
#include "cmd_eval_output.h"
#include "common.h"
#include "dist_studies.h"
#include "kvlab/boost_sweep.h"
#include "kvlab/dist.h"
#include "kvlab/svg_plot.h"
#include "study_device.h"

namespace kvlab::cli {
namespace {

using calib::csv_number;

struct SweepArgs {
  std::string dump, method = "kitty", rates = "0,0.0625,0.125,0.25,0.5,1",
                    selectors = "magnitude,random,variance,oracle", queries, layers, out;
  DeviceArgs device;
  int seeds = 5, threads = 0;
  int64_t calib_tokens = 0, calib_queries = 256;
  bool quiet = false;
};

std::string rows_csv(const SweepResult& r) {
  std::ostringstream os;
  os << "selector,rate,seed,boost_k,attn_score_mse,attn_output_rel_err,kl,topk_overlap,bits_per_element,key_"
        "bits\n";
  for (const SweepRow& x : r.rows)
    os << to_string(x.selector) << ',' << csv_number(x.rate) << ','
       << (x.seed < 0 ? std::string("") : std::to_string(x.seed)) << ',' << x.boost_k << ','
       << csv_number(x.attn.score_mse()) << ',' << csv_number(x.attn.out_rel_err()) << ','
       << csv_number(x.attn.kl()) << ',' << csv_number(x.attn.topk_overlap()) << ','
       << csv_number(x.bits.both()) << ',' << csv_number(x.bits.key) << '\n';
  return os.str();
}

std::string summary_csv(const SweepResult& r) {
  std::ostringstream os;
  os << "selector,rate,boost_k,runs,attn_score_mse_mean,attn_score_mse_std,attn_score_mse_min,attn_score_mse_"
        "max,"
        "attn_output_rel_err_mean,attn_output_rel_err_std,bits_per_element\n";
  for (const SweepSummary& s : r.summary)
    os << to_string(s.selector) << ',' << csv_number(s.rate) << ',' << s.boost_k << ',' << s.runs << ','
       << csv_number(s.score_mse_mean) << ',' << csv_number(s.score_mse_std) << ','
       << csv_number(s.score_mse_min) << ',' << csv_number(s.score_mse_max) << ','
       << csv_number(s.out_err_mean) << ',' << csv_number(s.out_err_std) << ',' << csv_number(s.bits) << '\n';
  return os.str();
}

// One line per selector over the rates; random with min-max bars over its seeds.
std::string chart(const SweepResult& r, const std::vector<double>& rates, bool output,
                  const std::string& src) {
  LineChart c;
  c.title = (output ? "Attention output error vs boost rate: " : "Attention-score MSE vs boost rate: ") + src;
  c.x_label = "boost rate (share of key channels at kbits+2); bits/element below";
  c.y_label = output ? "relative output error" : "attention-score MSE";
  for (double rate : rates)
    for (const SweepSummary& s : r.summary)
      if (s.rate == rate) {
        char b[48];
        std::snprintf(b, sizeof b, "%g (%.2f)", rate, s.bits);
        c.x_ticks.push_back(b);
        break;
      }
  std::vector<Selector> order;
  for (const SweepSummary& s : r.summary)
    if (std::find(order.begin(), order.end(), s.selector) == order.end()) order.push_back(s.selector);
  for (Selector sel : order) {
    Series sr;
    sr.name = to_string(sel);
    for (double rate : rates)
      for (const SweepSummary& s : r.summary)
        if (s.selector == sel && s.rate == rate) {
          sr.y.push_back(output ? s.out_err_mean : s.score_mse_mean);
          if (s.runs > 1 && !output) sr.lo.push_back(s.score_mse_min), sr.hi.push_back(s.score_mse_max);
          if (s.runs > 1 && output)
            sr.lo.push_back(s.out_err_mean - s.out_err_std), sr.hi.push_back(s.out_err_mean + s.out_err_std);
        }
    if (sel == Selector::Random) sr.name += output ? " (mean +- std)" : " (mean, min-max)";
    c.series.push_back(sr);
  }
  return line_chart_svg(c);
}

void run(const SweepArgs& a) {
  if (a.out.empty())
    throw std::invalid_argument("--out: give the CSV path (pictures are written next to it)");
  SweepOptions o;
  o.method = a.method;
  o.rates = parse_rates(a.rates);
  o.selectors = parse_selectors(a.selectors);
  o.seeds = a.seeds;
  o.calib_tokens = a.calib_tokens;
  o.calib_queries = a.calib_queries;
  o.threads = a.threads;
  if (!a.queries.empty()) o.queries = parse_queries(a.queries);
  if (!a.layers.empty()) o.layers = parse_layers(a.layers);
  if (!a.quiet) o.progress = calib::progress("boost-sweep");
  // rates in ascending order, without repeats, for the charts
  std::vector<double> rates = o.rates;
  std::sort(rates.begin(), rates.end());
  rates.erase(std::unique(rates.begin(), rates.end()), rates.end());
  o.rates = rates;
  const std::string path = a.dump.empty() ? default_dump_path() : a.dump;
  std::vector<NamedPath> outputs = {{"--out", a.out}};
  for (const char* suffix : {"_summary.csv", "_score_mse.svg", "_output_err.svg"})
    outputs.push_back({"--out", calib::sibling(a.out, suffix)});
  check_outputs_not_inputs(outputs, dump_inputs(path));
  const StudyDevice device = open_study_device(a.device);
  o.backend = device.backend;
  o.codec = device.codec;
  const auto reader = open_dump_source(path);
  const dist::World& w = dist::world();
  if (w.size > 1) o.progress = nullptr;  // ranks run units, not layers
  const SweepResult r = w.size > 1
                            ? sweep_ranks(*reader, calib::shape_of(reader->info()), o)
                            : boost_sweep(calib::shape_of(reader->info()), calib::loader(*reader, true), o);
  if (!w.root()) return;  // only rank 0 writes
  if (device.summary && !a.quiet) std::fprintf(stderr, "boost-sweep: %s\n", device.summary().c_str());
  write_file_atomically(a.out, rows_csv(r));
  write_file_atomically(calib::sibling(a.out, "_summary.csv"), summary_csv(r));
  write_file_atomically(calib::sibling(a.out, "_score_mse.svg"),
                        chart(r, rates, false, calib::base_name(reader->path())));
  write_file_atomically(calib::sibling(a.out, "_output_err.svg"),
                        chart(r, rates, true, calib::base_name(reader->path())));

  std::vector<std::vector<std::string>> table{
      {"selector", "rate", "k", "runs", "score MSE", "(std)", "out err", "bits"}};
  for (const SweepSummary& s : r.summary)
    table.push_back({to_string(s.selector), csv_number(s.rate), std::to_string(s.boost_k),
                     std::to_string(s.runs), sci(s.score_mse_mean), s.runs > 1 ? sci(s.score_mse_std) : "",
                     sci(s.out_err_mean), fixed(s.bits, 3)});
  print_table(table);
  std::printf(
      "%s: %s, layers %lld-%lld, %lld queries from position %lld, oracle calibrated on tokens 0..%lld; %.1f "
      "s\n"
      "wrote %s, %s, %s, %s\n",
      reader->path().c_str(), r.method.c_str(), (long long)r.layers.first, (long long)r.layers.last,
      (long long)r.num_queries, (long long)r.first_query, (long long)r.calib_tokens - 1, r.seconds,
      a.out.c_str(), calib::sibling(a.out, "_summary.csv").c_str(),
      calib::sibling(a.out, "_score_mse.svg").c_str(), calib::sibling(a.out, "_output_err.svg").c_str());
}

}  // namespace

static void add_boost_sweep(CLI::App& app) {
  auto a = std::make_shared<SweepArgs>();
  auto* c = app.add_subcommand("boost-sweep",
                               "Kitty's boost rate against the channel selector (magnitude, random, "
                               "variance, oracle): attention error and bits (CSV + SVG)");
  add_dump_arg(c, a->dump);
  c->add_option("--method", a->method, "base Kitty spec (its boost is replaced by each rate)")
      ->capture_default_str();
  c->add_option("--rates", a->rates, "boost rates in [0, 1], comma-separated")->capture_default_str();
  c->add_option("--selectors", a->selectors, "magnitude, random, variance, oracle, prefix-magnitude")
      ->capture_default_str();
  c->add_option("--seeds", a->seeds, "random selector: seeds 0..N-1")
      ->check(int_range(1))
      ->capture_default_str();
  c->add_option("--calib-tokens", a->calib_tokens, "oracle's calibration prefix in tokens (0: T/2)")
      ->check(int_range(0))
      ->capture_default_str();
  c->add_option("--calib-queries", a->calib_queries, "oracle: the prefix's last N queries")
      ->check(int_range(1))
      ->capture_default_str();
  c->add_option("--queries", a->queries,
                "evaluation queries, all after the prefix (default last:min(256, T - prefix))");
  add_layers_option(c, a->layers);
  add_threads_option(c, a->threads);
  add_out_option(c, a->out, "SWEEP.csv; SWEEP_summary.csv and the SVG charts go next to it")->required();
  add_device_option(c, a->device);
  add_quiet_flag(c, a->quiet);
  c->callback([a] { run(*a); });
}

KVLAB_COMMAND(61, add_boost_sweep);

}  // namespace kvlab::cli
