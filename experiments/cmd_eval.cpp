// kvlab eval [DUMP] [--methods m1,m2,...] [--queries all|last:N|stride:N] [--layers a-b]
//            [--format table|csv|json] [--out FILE] [--quiet] [--threads N] [--device cpu|cuda [--share-gpu]
//            [--methods-on cpu|cuda]]
//            [--cache-dir DIR]
// Offline error evaluation of KV-cache methods on a dump (kvlab/evaluate.h). DUMP is a file
// open_dump reads, or `synthetic:PRESET[:tokens=N,layers=N,seed=N]` to generate one in memory;
// without one, the reference model's dump, made on first use and cached (reference_dump.h).
#include <malloc.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <memory>
#include <sstream>
#include <stdexcept>

#include "cli_options.h"
#include "cmd_eval_output.h"
#include "common.h"
#include "dist_studies.h"
#include "dump_source.h"
#include "kvlab/dist.h"
#include "kvlab/dump.h"
#include "kvlab/evaluate.h"
#include "kvlab/kv_text.h"
#include "kvlab/method.h"
#include "kvlab/reference_dump.h"
#include "study_device.h"

namespace kvlab::cli {
namespace {

struct EvalArgs {
  std::string dump, queries = "all", layers, format = "table", out, cache_dir;
  DeviceArgs device;
  std::vector<std::string> methods;
  int threads = 0;
  int64_t query_tile = 64, key_tile = 256;
  bool quiet = false;
};

void run(const EvalArgs& a) {
  // Every KV head allocates and frees the same few tens of MB per method; with glibc's default
  // thresholds those come from fresh mmaps each time (page faults: ~20% of the CPU time at 32K
  // tokens). Keep them in the heap instead.
  mallopt(M_MMAP_THRESHOLD, 512 << 20);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
  EvalOptions opt;
  for (const auto& item : a.methods)
    for (auto& m : split_method_list(item)) opt.methods.push_back(m);
  opt.queries = parse_queries(a.queries);
  if (!a.layers.empty()) opt.layers = parse_layers(a.layers);
  opt.threads = a.threads;
  opt.tiles = {a.query_tile, a.key_tile};

  // The GPU (the device of this process's local rank) computes the attention units; the CPU
  // cores apply the methods and load the next layer meanwhile. A missing GPU and bad methods
  // are reported before the default dump is made (seconds, the first time).
  const StudyDevice device = open_study_device(a.device);
  opt.backend = device.backend;
  opt.prefetch = (bool)device.backend;
  opt.codec = device.codec;
  for (const std::string& m : opt.methods) parse_method(m);
  ReferenceDumpOptions ref;
  ref.cache_dir = a.cache_dir;
  const std::string path = a.dump.empty() ? default_eval_dump(ref) : a.dump;
  if (!a.out.empty()) {
    std::vector<NamedPath> inputs = dump_inputs(path);
    for (const std::string& m : opt.methods)
      for (const std::string& file : parse_method(m)->files()) inputs.push_back({"--methods", file});
    check_outputs_not_inputs({{"--out", a.out}}, inputs);
  }
  const std::unique_ptr<DumpReader> reader = open_dump_source(path);
  const DumpInfo& info = reader->info();
  const EvalShape shape{info.num_layers, info.num_q_heads, info.num_kv_heads,      info.head_dim,
                        info.tokens,     info.rope_style,  (float)info.rope_theta, info.has_k_pre_rope};
  const bool pre_rope = info.has_k_pre_rope && eval_needs_k_pre_rope(opt.methods);
  const LayerLoader load = [&](int64_t layer) {
    LayerQKV x;
    x.q = reader->read(layer, Role::Q);
    x.k = reader->read(layer, Role::K);
    x.v = reader->read(layer, Role::V);
    if (pre_rope) x.k_pre_rope = reader->read(layer, Role::KPreRope);
    return x;
  };
  const dist::World& w = dist::world();
  if (!a.quiet && w.size == 1) {  // ranks run units, not layers: no progress lines
    const bool tty = isatty(fileno(stderr));
    opt.progress = [tty](const EvalProgress& p) {
      const double eta = p.elapsed_s / p.layers_done * (p.layers_total - p.layers_done);
      std::fprintf(stderr, "%seval: layer %lld/%lld  elapsed %.1f s  ETA %.1f s%s", tty ? "\r" : "",
                   (long long)p.layers_done, (long long)p.layers_total, p.elapsed_s, eta, tty ? "  " : "\n");
      if (tty && p.layers_done == p.layers_total) std::fprintf(stderr, "\n");
      std::fflush(stderr);
    };
  }
  const EvalResult r = w.size > 1 ? evaluate_ranks(*reader, shape, opt) : evaluate(shape, load, opt);
  if (!w.root()) return;  // only rank 0 writes
  if (device.summary && !a.quiet)
    std::fprintf(stderr, "eval: %s; load wait %.2f s, quantize %.2f s, total %.2f s\n",
                 device.summary().c_str(), r.times.load, r.times.quantize, r.times.total);

  const ReportSource src{reader->path(), info.model};
  std::string text;
  if (a.format == "table") {
    text = eval_table(r, src);
  } else {
    std::ostringstream os;
    os.precision(17);
    if (a.format == "json")
      write_eval_json(os, r, src);
    else
      write_eval_csv(os, r);
    text = os.str();
  }
  if (a.out.empty())
    std::fwrite(text.data(), 1, text.size(), stdout);
  else
    write_file_atomically(a.out, text);
}

}  // namespace

static void add_eval(CLI::App& app) {
  auto a = std::make_shared<EvalArgs>();
  std::string methods;
  for (const auto& m : default_eval_methods()) methods += (methods.empty() ? "" : ",") + m;
  auto* c = app.add_subcommand("eval",
                               "Error of KV-cache methods on a dump: reconstruction, attention scores, "
                               "outputs, KL, top-8, bits per element");
  add_dump_arg(
      c, a->dump,
      "dump file, or synthetic:PRESET[:tokens=N,layers=N,seed=N] (default: $KVLAB_DEFAULT_DUMP, else the "
      "reference model data/kvlab-ref-18m on 2048 held-out tokens, made on first use and cached)");
  c->add_option(
      "--cache-dir", a->cache_dir,
      "where the default dump is cached (default: $KVLAB_CACHE_DIR, else $XDG_CACHE_HOME/kvlab, else "
      "~/.cache/kvlab)");
  c->add_option("--methods", a->methods,
                "methods, comma-separated presets or specs (default: " + methods + ")");
  add_queries_option(c, a->queries);
  add_layers_option(c, a->layers);
  add_format_option(c, a->format, "table, csv or json (schema: docs/EVAL_JSON.md)", {"table", "csv", "json"});
  add_out_option(c, a->out, "write to FILE instead of stdout (atomically)");
  add_threads_option(c, a->threads);
  c->add_option("--query-tile", a->query_tile, "queries per attention tile")
      ->check(int_range(1))
      ->capture_default_str();
  c->add_option("--key-tile", a->key_tile, "keys per attention tile")
      ->check(int_range(1))
      ->capture_default_str();
  add_device_option(c, a->device);
  add_quiet_flag(c, a->quiet);
  c->callback([a] { run(*a); });
}

KVLAB_COMMAND(40, add_eval);

}  // namespace kvlab::cli
