// `kvlab gpu validate [DUMP]|bench`: the options of gpu/cli/gpu_commands.cpp (shared with
// kvlab-gpu) plus the DUMP positional, which needs io/ (HDF5 and the other dump readers).
// Exit status: validate 1 on any mismatching byte; 2 for every subcommand without a CUDA device.
// Also installs the codebook encoder of the `vq` family's decode caches (eval_gpu's, over vq/) and
// adds attend-validate's vq methods, both of which the GPU-only build lacks.
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <filesystem>
#include <random>

#include "gpu_commands.h"
#include "kvlab/codebook_file.h"
#include "kvlab/dump.h"
#include "kvlab/vq.h"
#include "kvlab_eval_gpu/vq_encoder.h"
#include "kvlab_gpu/attention.h"

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
// Codebook files of random entries (8 KV heads, head_dim 128: attend-validate's cases) for specs
// that cover the codebook kernel's paths: 4-channel lookups with entries past shared memory
// (CQ-4c8b, and VQ<4,8,2>'s two stages), codes across words and padded rows (CQ-8c5b), one
// channel per lookup (CQ-2c4b). Removed at exit.
struct TempBooks {
  std::vector<std::string> paths;
  ~TempBooks() {
    for (const auto& p : paths) std::remove(p.c_str());
  }
};
std::vector<std::string> attend_vq_methods() {
  static TempBooks files;
  std::vector<std::string> methods;
  std::mt19937_64 rng(5);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (const char* spec : {"CQ-4c8b", "VQ<4,8,2>", "CQ-8c5b", "CQ-2c4b"}) {
    const VQSpec s = parse_vq_spec(spec);
    CodebookFile f;
    f.spec = to_string(s);
    f.vec = s.vec;
    f.bits = s.bits;
    f.stages = s.stages;
    f.num_layers = 1;
    f.num_kv_heads = 8;
    f.head_dim = 128;
    f.tokens = s.entries();
    f.model = "random";
    f.source = "kvlab gpu attend-validate (random entries)";
    f.roles = {"k", "v"};
    for (int role = 0; role < 2; ++role) {
      std::vector<float> b(f.num_kv_heads * f.book_floats());
      for (float& x : b) x = nd(rng);
      f.books.push_back(std::move(b));
      f.usage.emplace_back();
    }
    const std::string path =
        (std::filesystem::temp_directory_path() /
         ("kvlab-attend-" + std::to_string(getpid()) + "-" + std::to_string(files.paths.size()) + ".h5"))
            .string();
    write_codebook_file(path, f);
    files.paths.push_back(path);
    methods.push_back("vq:codebooks=" + path);
  }
  return methods;
}
}  // namespace

void add_gpu(CLI::App& app) {
  auto* g =
      app.add_subcommand("gpu", "CUDA kernels: validate against the CPU reference, benchmark bandwidth");
  g->require_subcommand(1);
  gpu::GpuCommandExtras extras;
  extras.load_dump = add_dump_data;
  extras.vq_methods = attend_vq_methods;
  install_vq_encoder();
  gpu::add_gpu_commands(*g, "kvlab gpu", extras);
}

}  // namespace kvlab::cli
