// kvlab synth --preset llama3-8b --tokens 4096 [--layers N] [--seed S] [--k-pre-rope] [--no-compress] --out
// DUMP.h5 Writes a realistic synthetic KV dump (kvlab/synthetic_dump.h) layer by layer: memory holds one role
// of one layer, as fp16.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <stdexcept>

#include "cli_options.h"
#include "common.h"
#include "kvlab/path_checks.h"
#include "kvlab/synthetic_dump.h"

namespace kvlab::cli {
namespace {

struct SynthArgs {
  std::string preset, out, rope_style;
  int64_t tokens = 0, layers = 0, q_heads = 0, kv_heads = 0, head_dim = 0, sink_tokens = 1;
  double rope_theta = 0;
  uint64_t seed = 0;
  bool k_pre_rope = false, quiet = false, no_compress = false;
  CLI::App* cmd = nullptr;
};

bool given(const SynthArgs& a, const char* opt) { return a.cmd->count(opt) > 0; }

SyntheticDumpParams params_of(const SynthArgs& a) {
  SyntheticDumpParams p = synthetic_preset(a.preset);
  if (given(a, "--tokens")) p.tokens = a.tokens;
  if (given(a, "--layers")) p.layers = a.layers;
  if (given(a, "--q-heads")) p.q_heads = a.q_heads;
  if (given(a, "--kv-heads")) p.kv_heads = a.kv_heads;
  if (given(a, "--head-dim")) p.head_dim = a.head_dim;
  if (given(a, "--rope-theta")) p.rope_theta = a.rope_theta;
  if (given(a, "--rope-style")) p.rope_style = parse_rope_style(a.rope_style);
  p.sink_tokens = a.sink_tokens;
  p.seed = a.seed;
  p.k_pre_rope = a.k_pre_rope;
  return p;
}

// Every setting, so the recorded `source` regenerates the same bytes.
std::string command_line(const SyntheticDumpParams& p, bool no_compress) {
  char b[512];
  std::snprintf(
      b, sizeof b,
      "kvlab synth --preset %s --layers %lld --q-heads %lld --kv-heads %lld --head-dim %lld --tokens %lld "
      "--rope-theta %.17g --rope-style %s --sink-tokens %lld --seed %llu%s%s",
      p.preset.c_str(), (long long)p.layers, (long long)p.q_heads, (long long)p.kv_heads,
      (long long)p.head_dim, (long long)p.tokens, p.rope_theta, to_string(p.rope_style),
      (long long)p.sink_tokens, (unsigned long long)p.seed, p.k_pre_rope ? " --k-pre-rope" : "",
      no_compress ? " --no-compress" : "");
  return b;
}

void run(const SynthArgs& a) {
  using clock = std::chrono::steady_clock;
  check_outputs_not_inputs({{"--out", a.out}}, {});  // no inputs; refuses a directory
  const SyntheticDump gen(params_of(a));
  DumpInfo info = gen.info();
  info.source = command_line(gen.params(), a.no_compress) + " (" + info.source + ")";
  DumpWriteOptions opt;
  opt.compress = !a.no_compress;
  DumpWriter writer(a.out, info, opt);

  std::vector<Role> roles = {Role::Q, Role::K, Role::V};
  if (info.has_k_pre_rope) roles.push_back(Role::KPreRope);
  std::vector<uint16_t> buf(std::max(numel(info.shape(Role::Q)), numel(info.shape(Role::K))));
  const bool tty = isatty(fileno(stderr));
  const auto t0 = clock::now();
  double bytes = 0, gen_s = 0;  // fp16 bytes generated and written; seconds generating
  for (int64_t l = 0; l < info.num_layers; ++l) {
    for (Role r : roles) {
      const auto g0 = clock::now();
      gen.generate_f16(l, r, 0, info.heads(r), buf.data());
      gen_s += std::chrono::duration<double>(clock::now() - g0).count();
      TensorView v{buf.data(), DType::F16, info.shape(r)};
      writer.write(l, r, v);
      bytes += 2.0 * (double)v.numel();
    }
    if (!a.quiet) {
      const double s = std::chrono::duration<double>(clock::now() - t0).count();
      const double eta = s / (l + 1) * (info.num_layers - l - 1);
      std::fprintf(stderr, "%slayer %lld/%lld  elapsed %.1f s  ETA %.1f s  %.0f MB/s%s", tty ? "\r" : "",
                   (long long)(l + 1), (long long)info.num_layers, s, eta, bytes / 1e6 / s,
                   tty ? "  " : "\n");
      std::fflush(stderr);
    }
  }
  writer.commit();
  const double s = std::chrono::duration<double>(clock::now() - t0).count();
  if (!a.quiet && tty) std::fprintf(stderr, "\n");
  std::printf(
      "%s: %s, %lld layers, q %s, k/v %s%s, float16; %.1f MB of fp16 -> %.1f MB file (%s) in %.2f s "
      "(%.0f MB/s; generating %.2f s = %.0f MB/s, writing %.2f s)\n",
      a.out.c_str(), info.model.c_str(), (long long)info.num_layers,
      shape_string(info.shape(Role::Q)).c_str(), shape_string(info.shape(Role::K)).c_str(),
      info.has_k_pre_rope ? " (+ k_pre_rope)" : "", bytes / 1e6,
      (double)std::filesystem::file_size(a.out) / 1e6, a.no_compress ? "uncompressed" : "shuffle+deflate", s,
      bytes / 1e6 / s, gen_s, bytes / 1e6 / gen_s, s - gen_s);
}

}  // namespace

static void add_synth(CLI::App& app) {
  auto a = std::make_shared<SynthArgs>();
  auto* c = app.add_subcommand(
      "synth", "Write a realistic synthetic KV dump (key outlier channels, RoPE, attention sinks)");
  a->cmd = c;
  c->add_option("--preset", a->preset, "model shape: " + synthetic_preset_choices())->required();
  add_out_option(c, a->out, "output dump (.h5)")->required();
  c->add_option("--tokens", a->tokens, "tokens T (preset: 4096; tiny 256)")->check(int_range(1));
  c->add_option("--layers", a->layers, "layers (preset's by default)")->check(int_range(1));
  c->add_option("--q-heads", a->q_heads, "query heads (preset's by default)")->check(int_range(1));
  c->add_option("--kv-heads", a->kv_heads, "KV heads (preset's by default)")->check(int_range(1));
  c->add_option("--head-dim", a->head_dim, "head dim D (preset's by default)")->check(int_range(1));
  c->add_option("--rope-theta", a->rope_theta, "RoPE base (preset's by default)")
      ->check(real_range(0, std::numeric_limits<double>::max(), true));
  c->add_option("--rope-style", a->rope_style, "adjacent (default), halves or none");
  c->add_option("--sink-tokens", a->sink_tokens, "leading tokens shaped as attention sinks")
      ->check(int_range(0))
      ->capture_default_str();
  c->add_option("--seed", a->seed, "generator seed: same seed and settings, same bytes")
      ->capture_default_str();
  c->add_flag("--k-pre-rope", a->k_pre_rope, "also write keys before RoPE (/layers/<i>/k_pre_rope)");
  c->add_flag("--no-compress", a->no_compress, "store chunks uncompressed (default: byte shuffle + deflate)");
  add_quiet_flag(c, a->quiet);
  c->callback([a] { run(*a); });
}

KVLAB_COMMAND(22, add_synth);

}  // namespace kvlab::cli
