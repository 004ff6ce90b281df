// kvlab-gpu validate [--small] [--seed N] [--exhaustive-div] [--preset P]... [--raw NAME:D0,D1,..:FILE]...
//         | bench [--reps N] [--warmup N] [--elements N] [--only TEXT] [--preset P]...
// Plain argv parsing, so it builds with -DKVLAB_GPU_ONLY=ON (no CLI11 on the GPU machine).
// Exit status: 0 ok, 1 mismatch, 2 no CUDA device, 3 usage or error.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <stdexcept>
#include <string>

#include "kvlab_gpu/gpu.h"

namespace {
int usage() {
  std::fprintf(stderr,
               "usage: kvlab-gpu validate [--small] [--seed N] [--exhaustive-div] [--arith-only] [--preset "
               "P]... [--raw NAME:D0,D1,...:FILE.f32]...\n"
               "       kvlab-gpu bench [--reps N] [--warmup N] [--elements N] [--only TEXT] [--preset P]...\n"
               "presets: v4 (default kernels), v4-ieee, v4-keys, v4-alt, v3; none given: all\n");
  return 3;
}
// NAME:D0,D1,...:FILE -> little-endian float32 values of that shape (how scripts/gpu_check.sh
// hands a dump's keys and values to this tool: the GPU machine's build has no HDF5).
kvlab::gpu::NamedData read_raw(const std::string& arg) {
  const size_t a = arg.find(':'), b = arg.find(':', a + 1);
  if (a == std::string::npos || b == std::string::npos)
    throw std::invalid_argument("--raw wants NAME:D0,D1,...:FILE, got " + arg);
  kvlab::gpu::NamedData d;
  d.name = arg.substr(0, a);
  const std::string dims = arg.substr(a + 1, b - a - 1), path = arg.substr(b + 1);
  for (size_t p = 0; p < dims.size();) {
    const size_t q = dims.find(',', p);
    d.shape.push_back(std::stoll(dims.substr(p, q - p)));
    p = q == std::string::npos ? dims.size() : q + 1;
  }
  int64_t n = 1;
  for (int64_t x : d.shape) n *= x;
  d.values.resize(n);
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) throw std::runtime_error("--raw: cannot open " + path);
  const size_t got = std::fread(d.values.data(), 4, n, f);
  const bool extra = std::fgetc(f) != EOF;
  std::fclose(f);
  if ((int64_t)got != n || extra)
    throw std::runtime_error("--raw: " + path + " does not hold " + std::to_string(n) + " float32 values");
  return d;
}
}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) return usage();
  const std::string cmd = argv[1];
  if (cmd != "validate" && cmd != "bench") return usage();
  const std::string problem = kvlab::gpu::device_problem();
  if (!problem.empty()) {
    std::fprintf(stderr, "kvlab-gpu %s: %s\n", cmd.c_str(), problem.c_str());
    return kvlab::gpu::kExitNoDevice;
  }
  try {
    if (cmd == "validate") {
      kvlab::gpu::ValidateOptions o;
      for (int i = 2; i < argc; ++i) {
        if (!std::strcmp(argv[i], "--small"))
          o.small = true;
        else if (!std::strcmp(argv[i], "--seed") && i + 1 < argc)
          o.seed = std::strtoull(argv[++i], nullptr, 10);
        else if (!std::strcmp(argv[i], "--raw") && i + 1 < argc)
          o.extra.push_back(read_raw(argv[++i]));
        else if (!std::strcmp(argv[i], "--exhaustive-div"))
          o.exhaustive_div = true;
        else if (!std::strcmp(argv[i], "--arith-only"))
          o.arith_only = true;
        else if (!std::strcmp(argv[i], "--preset") && i + 1 < argc)
          o.presets.push_back(argv[++i]);
        else
          return usage();
      }
      std::printf("device: %s\n", kvlab::gpu::device_name().c_str());
      const auto rows = kvlab::gpu::validate(o);
      kvlab::gpu::print_validation(rows, stdout);
      for (const auto& r : rows)
        if (r.mismatches) return kvlab::gpu::kExitMismatch;
      return 0;
    }
    kvlab::gpu::BenchOptions o;
    for (int i = 2; i < argc; ++i) {
      if (!std::strcmp(argv[i], "--reps") && i + 1 < argc)
        o.reps = std::atoi(argv[++i]);
      else if (!std::strcmp(argv[i], "--elements") && i + 1 < argc)
        o.elements = std::atoll(argv[++i]);
      else if (!std::strcmp(argv[i], "--only") && i + 1 < argc)
        o.only = argv[++i];
      else if (!std::strcmp(argv[i], "--warmup") && i + 1 < argc)
        o.warmup = std::atoi(argv[++i]);
      else if (!std::strcmp(argv[i], "--preset") && i + 1 < argc)
        o.presets.push_back(argv[++i]);
      else
        return usage();
    }
    if (o.reps < 1 || o.warmup < 0) return usage();
    kvlab::gpu::print_bench(kvlab::gpu::bench(o), stdout);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kvlab-gpu %s: error: %s\n", cmd.c_str(), e.what());
    return 3;
  }
}
