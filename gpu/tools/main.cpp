// kvlab-gpu validate|bench: the GPU kernels against the CPU reference, and their bandwidth.
// Builds with -DKVLAB_GPU_ONLY=ON (the GPU machine: CLI11 from third_party/CLI11). The options
// are declared once, in gpu/cli/gpu_commands.cpp, for this tool and for `kvlab gpu`.
// Exit status: 0 ok, 1 mismatch, 2 no CUDA device, 3 usage or error.
#include <CLI/CLI.hpp>

#include "gpu_commands.h"

int main(int argc, char** argv) {
  CLI::App app{"kvlab-gpu: CUDA kernels of kvlab's formats, validated byte for byte against the CPU"};
  app.require_subcommand(1);
  app.footer("Exit status: 0 ok, 1 mismatching bytes, 2 no CUDA device, 3 usage or error.");
  kvlab::gpu::add_gpu_commands(app, "kvlab-gpu");
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::RuntimeError& e) {
    return e.get_exit_code();
  } catch (const CLI::ParseError& e) {
    app.exit(e);  // prints the message and the usage hint
    return kvlab::gpu::kExitUsage;
  }
  return 0;
}
