// The GPU command line, declared once: `kvlab-gpu validate|bench` (gpu/tools/main.cpp, also in
// the GPU-only build) and `kvlab gpu validate|bench` (gpu/cli_gpu.cpp, full build) both call
// add_gpu_commands. Exit statuses (gpu.h): 0 ok, 1 mismatch, 2 no CUDA device, 3 usage or
// error (kvlab-gpu; `kvlab` keeps its own codes for parse errors).
#pragma once
#include <CLI/CLI.hpp>
#include <functional>
#include <string>

#include "kvlab_gpu/gpu.h"

namespace kvlab::gpu {

struct GpuCommandExtras {
  // Set in the full build: `validate [DUMP]` reads a dump's keys and values (HDF5 and the
  // other dump formats need datasets/, which the GPU-only build lacks).
  std::function<void(const std::string& path, ValidateOptions& opt)> load_dump;
  // Set in the full build: `vq` methods (codebook files it writes) that attend-validate adds to
  // its default methods (the GPU-only build cannot read codebook files).
  std::function<std::vector<std::string>()> vq_methods;
};

// Adds `validate` and `bench` to `parent`; `prog` ("kvlab-gpu", "kvlab gpu") prefixes messages.
// Failures leave through CLI::RuntimeError with the exit status above.
void add_gpu_commands(CLI::App& parent, const std::string& prog, const GpuCommandExtras& extras = {});

// NAME:D0,D1,...:FILE -> little-endian float32 values of that shape (how scripts/gpu_check.sh
// hands a dump's keys and values to kvlab-gpu: the GPU machine's build has no HDF5).
NamedData read_raw(const std::string& arg);

}  // namespace kvlab::gpu
