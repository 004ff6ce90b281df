// The `kvlab` command line: one subcommand per job.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <exception>

#include "common.h"
#include "kvlab/plan.h"
#include "kvlab/vq_method.h"

int main(int argc, char** argv) {
  CLI::App app{"kvlab: KV-cache quantization research toolkit"};
  app.require_subcommand(1);
  kvlab::register_vq_method();  // before the commands list or parse methods
  kvlab::register_plan_method();
#if defined(KVLAB_HAVE_GPU_CLI)
  kvlab::cli::register_command(kvlab::cli::kGpuCommandOrder, kvlab::cli::add_gpu);
#endif
  kvlab::cli::add_all_commands(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kvlab: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
