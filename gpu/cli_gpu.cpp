// `kvlab gpu validate|bench`: the GPU kernels against the CPU reference, and their bandwidth.
// Exit status: validate 1 on any mismatching byte; 2 for every subcommand without a CUDA device.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <memory>

#include "kvlab/dump.h"
#include "kvlab_gpu/gpu.h"

namespace kvlab::cli {

namespace {
void require_device(const char* what) {
  const std::string problem = gpu::device_problem();
  if (!problem.empty()) {
    std::fprintf(stderr, "kvlab gpu %s: %s\n", what, problem.c_str());
    throw CLI::RuntimeError(gpu::kExitNoDevice);
  }
}
// The dump's keys and values, every layer stacked: (L, Hkv, T, D) each.
void add_dump_data(const std::string& path, gpu::ValidateOptions& opt) {
  const auto dump = open_dump(path);
  const DumpInfo& in = dump->info();
  for (Role role : {Role::k, Role::v}) {
    gpu::NamedData d{
        std::string("dump-") + role_name(role), {in.num_layers, in.num_kv_heads, in.tokens, in.head_dim}, {}};
    for (int64_t l = 0; l < in.num_layers; ++l) {
      const Tensor t = dump->read(l, role);
      d.values.insert(d.values.end(), t.data.begin(), t.data.end());
    }
    opt.extra.push_back(std::move(d));
  }
}
}  // namespace

void add_gpu(CLI::App& app) {
  auto* g =
      app.add_subcommand("gpu", "CUDA kernels: validate against the CPU reference, benchmark bandwidth");
  g->require_subcommand(1);

  auto vopt = std::make_shared<gpu::ValidateOptions>();
  auto* v = g->add_subcommand(
      "validate", "Run every GPU kernel against the CPU reference; non-zero exit on any mismatch");
  auto dump_path = std::make_shared<std::string>();
  v->add_option("dump", *dump_path, "also validate on this dump's keys and values (all layers)");
  v->add_flag("--small", vopt->small, "skip the llama3-sized data");
  v->add_option("--seed", vopt->seed, "data seed")->capture_default_str();
  v->callback([vopt, dump_path] {
    require_device("validate");
    if (!dump_path->empty()) add_dump_data(*dump_path, *vopt);
    std::printf("device: %s\n", gpu::device_name().c_str());
    const auto rows = gpu::validate(*vopt);
    gpu::print_validation(rows, stdout);
    for (const auto& r : rows)
      if (r.mismatches) throw CLI::RuntimeError(gpu::kExitMismatch);
  });

  auto bopt = std::make_shared<gpu::BenchOptions>();
  auto* b = g->add_subcommand("bench", "Bandwidth of quantize+pack and unpack+dequantize vs cudaMemcpy D2D");
  b->add_option("--reps", bopt->reps, "timed runs per kernel (median reported)")
      ->capture_default_str()
      ->check(CLI::Range(1, 100000));
  b->add_option("--elements", bopt->elements, "elements per tensor (D=128, T=4096)")->capture_default_str();
  b->add_option("--only", bopt->only, "only formats whose spec contains this text");
  b->callback([bopt] {
    require_device("bench");
    gpu::print_bench(gpu::bench(*bopt), stdout);
  });
}

}  // namespace kvlab::cli
