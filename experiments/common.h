// Shared bits of the kvlab subcommands: registration and table printing.
#pragma once
#include <CLI/CLI.hpp>
#include <string>
#include <vector>

namespace kvlab::cli {

void add_quantize(CLI::App& app);
void add_methods(CLI::App& app);
void add_demo(CLI::App& app);
void add_gpu(CLI::App& app);  // gpu/cli_gpu.cpp, in builds with CUDA

// Print rows as an aligned text table; the first row is the header.
void print_table(const std::vector<std::vector<std::string>>& rows);
std::string fixed(double v, int digits);
std::string sci(double v, int digits = 3);

}  // namespace kvlab::cli
