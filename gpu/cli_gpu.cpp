// `kvlab gpu validate [DUMP]|bench`: the options of gpu/cli/gpu_commands.cpp (shared with
// kvlab-gpu) plus the DUMP positional, which needs io/ (HDF5 and the other dump readers).
// Exit status: validate 1 on any mismatching byte; 2 for every subcommand without a CUDA device.
#include <CLI/CLI.hpp>

#include "gpu_commands.h"
#include "kvlab/dump.h"

namespace kvlab::cli {

namespace {
// The dump's keys and values, every layer stacked: (L, Hkv, T, D) each.
void add_dump_data(const std::string& path, gpu::ValidateOptions& opt) {
  const auto dump = open_dump(path);
  const DumpInfo& in = dump->info();
  for (Role role : {Role::K, Role::V}) {
    gpu::NamedData d{
        std::string("dump-") + to_string(role), {in.num_layers, in.num_kv_heads, in.tokens, in.head_dim}, {}};
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
  gpu::GpuCommandExtras extras;
  extras.load_dump = add_dump_data;
  gpu::add_gpu_commands(*g, "kvlab gpu", extras);
}

}  // namespace kvlab::cli
