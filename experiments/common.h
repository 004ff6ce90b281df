// Shared bits of the kvlab subcommands: registration and table printing.
#pragma once
#include <CLI/CLI.hpp>
#include <string>
#include <vector>

namespace kvlab::cli {

// Each cmd_*.cpp registers its subcommand with KVLAB_COMMAND(order, add_fn); `kvlab --help`
// lists them by order. Registration is static so new commands touch no shared file. Every
// command has its own key (add_all_commands refuses two with the same), so the order never
// depends on link order:
//   20 dump, 21 tokenize, 22 synth, 24 info, 30 quantize, 40 eval, 55 kmeans, 60 sensitivity,
//   61 boost-sweep, 62 vq, 63 plan, 80 methods, 90 demo, 100 gpu (CUDA builds, registered by main),
//   41 ppl, 42 check-attention.
using AddCommand = void (*)(CLI::App&);
int register_command(int order, AddCommand add);
void add_all_commands(CLI::App& app);
#define KVLAB_COMMAND(order, add) \
  [[maybe_unused]] static const int kvlab_registered_command_ = ::kvlab::cli::register_command(order, add)

void add_gpu(CLI::App& app);  // gpu/cli_gpu.cpp, in builds with CUDA (a library: no static registration)
constexpr int kGpuCommandOrder = 100;

// Print rows as an aligned text table; the first row is the header.
void print_table(const std::vector<std::vector<std::string>>& rows);
std::string fixed(double v, int digits);
std::string sci(double v, int digits = 3);

}  // namespace kvlab::cli
