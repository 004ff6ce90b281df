// kvlab-gpu validate [--small] [--seed N] | bench [--reps N] [--elements N] [--only TEXT]
// Plain argv parsing, so it builds with -DKVLAB_GPU_ONLY=ON (no CLI11 on the GPU machine).
// Exit status: 0 ok, 1 mismatch, 2 no CUDA device, 3 usage or error.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <string>

#include "kvlab_gpu/gpu.h"

namespace {
int usage() {
  std::fprintf(stderr,
               "usage: kvlab-gpu validate [--small] [--seed N]\n"
               "       kvlab-gpu bench [--reps N] [--elements N] [--only TEXT]\n");
  return 3;
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
        if (!std::strcmp(argv[i], "--small")) o.small = true;
        else if (!std::strcmp(argv[i], "--seed") && i + 1 < argc) o.seed = std::strtoull(argv[++i], nullptr, 10);
        else return usage();
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
      if (!std::strcmp(argv[i], "--reps") && i + 1 < argc) o.reps = std::atoi(argv[++i]);
      else if (!std::strcmp(argv[i], "--elements") && i + 1 < argc) o.elements = std::atoll(argv[++i]);
      else if (!std::strcmp(argv[i], "--only") && i + 1 < argc) o.only = argv[++i];
      else return usage();
    }
    if (o.reps < 1) return usage();
    kvlab::gpu::print_bench(kvlab::gpu::bench(o), stdout);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kvlab-gpu %s: error: %s\n", cmd.c_str(), e.what());
    return 3;
  }
}
