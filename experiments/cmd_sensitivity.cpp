// kvlab sensitivity [DUMP] [--bits 2] [--group 128] [--sink 32] [--queries all|last:N|stride:N]
//                   [--layers a-b] [--threads N] [--naive] [--device cpu|cuda [--share-gpu]] --out SENS.csv
// Per (layer, KV head, query head, key channel): the attention-score MSE when only that channel
// is quantized (kvlab/sensitivity.h). Writes SENS.csv, SENS_ranking.csv (Spearman of magnitude
// against sensitivity, top-k recall per layer and KV head) and SENS_heatmap.svg.
#include <cmath>
#include <cstdio>
#include <sstream>

#include "calibration_io.h"
#include "cli_options.h"
#include "cmd_eval_output.h"
#include "common.h"
#include "dist_studies.h"
#include "kvlab/dist.h"
#include "kvlab/sensitivity.h"
#include "kvlab/svg_plot.h"
#include "study_device.h"

namespace kvlab::cli {
namespace {

using calib::csv_number;

struct SensArgs {
  std::string dump, queries = "all", layers, out, params = "fp16";
  int bits = 2, group = 128, sink = 32, threads = 0;
  bool naive = false, quiet = false;
  DeviceArgs device;
};

std::string rows_csv(const SensitivityResult& r) {
  std::ostringstream os;
  os << "layer,kv_head,q_head,channel,attn_score_mse,mean_abs,max_abs,variance\n";
  for (const SensitivityRow& x : r.rows)
    os << x.layer << ',' << x.kv_head << ',' << x.q_head << ',' << x.channel << ','
       << csv_number(x.attn_score_mse) << ',' << csv_number(x.stats.mean_abs) << ','
       << csv_number(x.stats.max_abs) << ',' << csv_number(x.stats.variance) << '\n';
  return os.str();
}

std::string ranking_csv(const SensitivityResult& r) {
  std::ostringstream os;
  os << "layer,kv_head,spearman";
  const std::vector<std::string> names{"d16", "d8", "d4"};
  for (const auto& n : names) os << ",k_" << n << ",recall_" << n;
  os << '\n';
  for (const RankingRow& x : r.rankings) {
    os << x.layer << ',' << x.kv_head << ',' << csv_number(x.spearman);
    for (size_t i = 0; i < x.ks.size(); ++i) os << ',' << x.ks[i] << ',' << csv_number(x.recall[i]);
    os << '\n';
  }
  return os.str();
}

// Rows (layer, KV head), sensitivity averaged over the KV head's query heads.
std::string heatmap(const SensitivityResult& r, const std::string& source) {
  Heatmap h;
  const int64_t D = r.shape.head_dim, per = r.shape.num_q_heads / r.shape.num_kv_heads;
  h.cols = D;
  for (const SensitivityRow& x : r.rows) {
    if (x.channel == 0 && x.q_head % per == 0) {
      h.row_labels.push_back("L" + std::to_string(x.layer) + " H" + std::to_string(x.kv_head));
      h.values.resize(h.values.size() + D, 0.0);
    }
    h.values[h.values.size() - D + x.channel] += x.attn_score_mse / (double)per;
  }
  h.title = "Key-channel sensitivity: " + source;
  h.x_label = "key channel (only this one quantized)";
  h.y_label = "layer, KV head";
  h.value_label = "score MSE";
  return heatmap_svg(h);
}

void run(const SensArgs& a) {
  if (a.out.empty())
    throw std::invalid_argument("--out: give the CSV path (pictures are written next to it)");
  SensitivityOptions o;
  o.bits = a.bits;
  o.group = a.group;
  o.sink = a.sink;
  o.threads = a.threads;
  o.naive = a.naive;
  o.params = a.params == "fp32" ? ParamType::F32 : ParamType::F16;
  o.queries = parse_queries(a.queries);
  if (!a.layers.empty()) o.layers = parse_layers(a.layers);
  if (!a.quiet) o.progress = calib::progress("sensitivity");
  if (a.naive && a.device.device == "cuda")
    throw std::invalid_argument("--naive runs on the CPU only (it is the reference of --device cuda)");
  // The GPU of this process's local rank computes each KV head's sums; the CPU finishes them.
  const StudyDevice device = open_study_device(a.device);
  o.backend = device.sensitivity;
  o.codec = device.codec;
  const std::string path = a.dump.empty() ? default_dump_path() : a.dump;
  check_outputs_not_inputs({{"--out", a.out},
                            {"--out", calib::sibling(a.out, "_ranking.csv")},
                            {"--out", calib::sibling(a.out, "_heatmap.svg")}},
                           dump_inputs(path));
  const auto reader = open_dump_source(path);
  const dist::World& w = dist::world();
  if (w.size > 1) o.progress = nullptr;  // ranks run units, not layers
  const SensitivityResult r =
      w.size > 1 ? sensitivity_ranks(*reader, calib::shape_of(reader->info()), o)
                 : channel_sensitivity(calib::shape_of(reader->info()), calib::loader(*reader, false), o);
  if (!w.root()) return;  // only rank 0 writes
  if (device.summary && !a.quiet) std::fprintf(stderr, "sensitivity: %s\n", device.summary().c_str());
  write_file_atomically(a.out, rows_csv(r));
  write_file_atomically(calib::sibling(a.out, "_ranking.csv"), ranking_csv(r));
  write_file_atomically(calib::sibling(a.out, "_heatmap.svg"), heatmap(r, calib::base_name(reader->path())));

  std::vector<std::vector<std::string>> table{{"layer", "kv_head", "spearman", "k", "recall"}};
  for (const RankingRow& x : r.rankings) {
    std::string ks, rec;
    for (size_t i = 0; i < x.ks.size(); ++i) {
      if (i) {
        ks += '/';
        rec += '/';
      }  // appends: `(i ? "/" : "") + ...` trips GCC 12's -Wrestrict
      ks += std::to_string(x.ks[i]);
      rec += std::isnan(x.recall[i]) ? std::string("-") : fixed(x.recall[i], 2);
    }
    table.push_back({std::to_string(x.layer), std::to_string(x.kv_head),
                     std::isnan(x.spearman) ? "-" : fixed(x.spearman, 3), ks, rec});
  }
  print_table(table);
  std::printf(
      "%s: %lld layers x %lld query heads x %lld channels, %lld queries, keys %lld..%lld quantized; "
      "%.2f s (%.2f s reading)%s\nwrote %s, %s, %s\n",
      reader->path().c_str(), (long long)(r.layers.last - r.layers.first + 1), (long long)r.shape.num_q_heads,
      (long long)r.shape.head_dim, (long long)r.num_queries, (long long)r.key_begin, (long long)r.key_end - 1,
      r.seconds, r.load_seconds, a.naive ? " [naive path]" : "", a.out.c_str(),
      calib::sibling(a.out, "_ranking.csv").c_str(), calib::sibling(a.out, "_heatmap.svg").c_str());
}

}  // namespace

static void add_sensitivity(CLI::App& app) {
  auto a = std::make_shared<SensArgs>();
  auto* c = app.add_subcommand("sensitivity",
                               "Attention-score error of quantizing each key channel alone; "
                               "how well magnitude ranks it (CSV + SVG heatmap)");
  add_dump_arg(c, a->dump);
  c->add_option("--bits", a->bits, "code bits of the quantized channel")
      ->check(int_range(1, 8))
      ->capture_default_str();
  c->add_option("--group", a->group, "tokens per channel group")->check(int_range(1))->capture_default_str();
  c->add_option("--sink", a->sink, "leading tokens kept exact")->check(int_range(0))->capture_default_str();
  c->add_option("--params", a->params, "scale/zero storage")
      ->check(CLI::IsMember({"fp16", "fp32"}))
      ->capture_default_str();
  add_queries_option(c, a->queries);
  add_layers_option(c, a->layers);
  add_threads_option(c, a->threads);
  c->add_flag("--naive", a->naive, "recompute every logit per channel (the reference; about D times slower)");
  add_device_option(c, a->device);
  add_out_option(c, a->out, "SENS.csv; SENS_ranking.csv and SENS_heatmap.svg go next to it")->required();
  add_quiet_flag(c, a->quiet);
  c->callback([a] { run(*a); });
}

KVLAB_COMMAND(60, add_sensitivity);

}  // namespace kvlab::cli
