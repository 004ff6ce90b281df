// `validate` and `bench`: the one declaration of the GPU command line (gpu_commands.h).
#include "gpu_commands.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <stdexcept>

#include "kvlab/kv_text.h"
#include "kvlab/sizes.h"
#include "kvlab_gpu/attention.h"

namespace kvlab::gpu {

NamedData read_raw(const std::string& arg) {
  const size_t a = arg.find(':');
  const size_t b = a == std::string::npos ? a : arg.find(':', a + 1);
  if (a == std::string::npos || b == std::string::npos)
    throw std::invalid_argument("--raw wants NAME:D0,D1,...:FILE, got " + arg);
  NamedData d;
  d.name = arg.substr(0, a);
  const std::string dims = arg.substr(a + 1, b - a - 1);
  const std::string path = arg.substr(b + 1);
  for (size_t p = 0; p < dims.size();) {
    const size_t q = dims.find(',', p);
    d.shape.push_back(text::parse_count(dims.substr(p, q - p), "--raw " + d.name + " dimension"));
    p = q == std::string::npos ? dims.size() : q + 1;
  }
  int64_t n = 1;
  for (int64_t x : d.shape) n = checked_product({n, x, 4}, "--raw " + arg + ": the shape in bytes") / 4;
  struct stat st {};
  if (stat(path.c_str(), &st) != 0)
    throw std::runtime_error("--raw: cannot open '" + path + "': " + std::strerror(errno));
  if (!S_ISREG(st.st_mode) || st.st_size != n * 4)  // checked before allocating n floats
    throw std::runtime_error("--raw: " + path + " does not hold " + std::to_string(n) + " float32 values");
  d.values.resize(n);
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) throw std::runtime_error("--raw: cannot open '" + path + "': " + std::strerror(errno));
  const size_t got = std::fread(d.values.data(), 4, n, f);
  std::fclose(f);
  if ((int64_t)got != n) throw std::runtime_error("--raw: cannot read " + path + ": " + std::strerror(errno));
  return d;
}

namespace {

void require_device(const std::string& prog, const char* what) {
  const std::string problem = device_problem();
  if (!problem.empty()) {
    std::fprintf(stderr, "%s %s: %s\n", prog.c_str(), what, problem.c_str());
    throw CLI::RuntimeError(kExitNoDevice);
  }
}

// Library errors (bad preset, unreadable file, CUDA failure) as exit status 3.
template <class F>
void run_or_exit(const std::string& prog, const char* what, F&& f) {
  try {
    f();
  } catch (const CLI::Error&) {
    throw;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s %s: error: %s\n", prog.c_str(), what, e.what());
    throw CLI::RuntimeError(kExitUsage);
  }
}

// Presets are checked while parsing, so a typo fails before any GPU work.
CLI::Validator preset_validator() {
  return CLI::Validator(
      [](std::string& name) -> std::string {
        try {
          find_kernel_variant(name);
        } catch (const std::invalid_argument& e) {
          return e.what();
        }
        return "";
      },
      "VARIANT");
}

void add_validate(CLI::App& parent, const std::string& prog, const GpuCommandExtras& extras) {
  auto opt = std::make_shared<ValidateOptions>();
  auto raw = std::make_shared<std::vector<std::string>>();
  auto dump = std::make_shared<std::string>();
  auto* v = parent.add_subcommand("validate",
                                  "Run every GPU kernel variant against the CPU reference; exit 1 on any "
                                  "mismatching byte");
  v->footer(
      "Kernel variants (--preset NAME, former names accepted; none given: all):\n" + kernel_variant_help() +
      "Formats: the entries of kvlab::kFormats (core/include/kvlab/formats.h) with gpu=true; the others "
      "are listed as CPU only.");
  if (extras.load_dump)
    v->add_option("dump", *dump, "also validate on this dump's keys and values (all layers)");
  v->add_flag("--small", opt->small, "skip the llama3-sized data (for compute-sanitizer runs)");
  v->add_option("--seed", opt->seed, "data seed")->capture_default_str();
  v->add_flag("--exhaustive-div", opt->exhaustive_div,
              "fastdiv row over all 2^46 significand pairs (about a minute on an H200)");
  v->add_flag("--arith-only", opt->arith_only, "only the device-arithmetic rows (fp16-cvt, fastdiv, minmax)");
  v->add_option("--preset", opt->presets, "kernel variant to check (repeatable; default: all)")
      ->check(preset_validator())
      ->allow_extra_args(false);
  v->add_option("--only", opt->only, "only kFormats entries whose name or spec contains this text");
  v->add_option("--raw", *raw, "extra data NAME:D0,D1,...:FILE.f32 (little-endian float32; repeatable)")
      ->allow_extra_args(false);
  v->callback([opt, raw, dump, prog, extras] {
    require_device(prog, "validate");
    run_or_exit(prog, "validate", [&] {
      for (const std::string& r : *raw) opt->extra.push_back(read_raw(r));
      if (!dump->empty()) extras.load_dump(*dump, *opt);
      std::printf("device: %s\n", device_name().c_str());
      const auto rows = validate(*opt);
      print_validation(rows, stdout);
      for (const auto& r : rows)
        if (r.mismatches) throw CLI::RuntimeError(kExitMismatch);
    });
  });
}

void add_bench(CLI::App& parent, const std::string& prog) {
  auto opt = std::make_shared<BenchOptions>();
  auto* b =
      parent.add_subcommand("bench", "Bandwidth of quantize+pack and unpack+dequantize vs cudaMemcpy D2D");
  b->footer(
      "Kernel variants (--preset NAME; none given: all), timed side by side in the directions they "
      "change:\n" +
      kernel_variant_help() + "Formats: the kvlab::kFormats entries with bench=true.");
  b->add_option("--reps", opt->reps, "timed runs per kernel (median reported)")
      ->capture_default_str()
      ->check(CLI::Range(1, 100000));
  b->add_option("--warmup", opt->warmup, "untimed runs before the timed ones")
      ->capture_default_str()
      ->check(CLI::Range(0, 100000));
  b->add_option("--elements", opt->elements, "elements per tensor (D=128, T=4096)")->capture_default_str();
  b->add_option("--only", opt->only, "only kFormats entries whose name or spec contains this text");
  b->add_option("--preset", opt->presets, "kernel variant to time (repeatable; default: all)")
      ->check(preset_validator())
      ->allow_extra_args(false);
  b->callback([opt, prog] {
    require_device(prog, "bench");
    run_or_exit(prog, "bench", [&] { print_bench(bench(*opt), stdout); });
  });
}

void add_attend_validate(CLI::App& parent, const std::string& prog, const GpuCommandExtras& extras) {
  auto opt = std::make_shared<AttnValidateOptions>();
  auto* v =
      parent.add_subcommand("attend-validate",
                            "Decode attention on packed caches vs the fp64 reference over core's K_hat/V_hat "
                            "(error bound), and the "
                            "kernel's dequantized values vs core's, byte for byte; exit 1 on a failure");
  v->add_option("--method", opt->methods,
                "method preset or spec (repeatable; default: fp16 int8 kivi-4 kivi-2 "
                "kivi-2-sink kitty, and in `kvlab gpu` vq methods of random codebooks)")
      ->allow_extra_args(false);
  v->add_flag("--small", opt->small, "short sequences only (for compute-sanitizer runs)");
  v->add_option("--seed", opt->seed, "data seed")->capture_default_str();
  auto vk = std::make_shared<std::string>("auto");
  v->add_option("--kernel", *vk,
                "auto (the kernel each case gets, and the split kernel too where that is the streaming one), "
                "split, stream or codebook (each skips the methods it does not serve)")
      ->check(CLI::IsMember({"auto", "split", "stream", "codebook"}))
      ->capture_default_str();
  v->callback([opt, prog, vk, extras] {
    opt->kernel = parse_decode_kernel(*vk);
    require_device(prog, "attend-validate");
    run_or_exit(prog, "attend-validate", [&] {
      if (opt->methods.empty() && extras.vq_methods) opt->extra_methods = extras.vq_methods();
      std::printf("device: %s\n", device_name().c_str());
      const auto rows = validate_attention(*opt);
      print_attention_validation(rows, stdout);
      for (const auto& r : rows)
        if (!r.ok()) throw CLI::RuntimeError(kExitMismatch);
    });
  });
}

void add_attend_bench(CLI::App& parent, const std::string& prog) {
  auto opt = std::make_shared<AttnBenchOptions>();
  auto* b =
      parent.add_subcommand("attend-bench",
                            "Decode attention on packed caches: time, bandwidth of the cache's bytes vs "
                            "cudaMemcpy D2D, and kvlab's dequantize time (scripts/attend_sdpa.py adds SDPA)");
  b->add_option("--method", opt->methods,
                "method preset or spec, or a VQ spec (CQ-4c8b, VQ<4,8,2>: random codebooks and codes) "
                "(repeatable; default: fp16 int8 kivi-4 kivi-2 kitty CQ-4c8b)")
      ->allow_extra_args(false);
  b->add_option("--batch", opt->batches, "batch sizes")
      ->capture_default_str()
      ->allow_extra_args(false)
      ->delimiter(',');
  b->add_option("--length", opt->lengths, "tokens per sequence")
      ->capture_default_str()
      ->allow_extra_args(false)
      ->delimiter(',');
  b->add_option("--q-heads", opt->Hq, "query heads")->capture_default_str()->check(CLI::Range(1, 1024));
  b->add_option("--kv-heads", opt->Hkv, "KV heads")->capture_default_str()->check(CLI::Range(1, 1024));
  b->add_option("--head-dim", opt->D, "head dim (64 or 128)")->capture_default_str();
  b->add_option("--reps", opt->reps, "timed runs (median)")
      ->capture_default_str()
      ->check(CLI::Range(1, 100000));
  b->add_option("--csv", opt->csv, "also write the rows as CSV");
  auto bk = std::make_shared<std::string>("auto");
  b->add_option("--kernel", *bk,
                "auto (streaming where it serves, else split; codebook for VQ specs), split or stream")
      ->check(CLI::IsMember({"auto", "split", "stream"}))
      ->capture_default_str();
  b->callback([opt, prog, bk] {
    opt->kernel = parse_decode_kernel(*bk);
    require_device(prog, "attend-bench");
    run_or_exit(prog, "attend-bench", [&] { attend_bench(*opt, stdout); });
  });
}

}  // namespace

void add_gpu_commands(CLI::App& parent, const std::string& prog, const GpuCommandExtras& extras) {
  add_validate(parent, prog, extras);
  add_bench(parent, prog);
  add_attend_validate(parent, prog, extras);
  add_attend_bench(parent, prog);
}

}  // namespace kvlab::gpu
