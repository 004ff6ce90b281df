// `--device cpu|cuda` of the study commands (eval, boost-sweep): the backend that computes the
// attention units (kvlab/attention_unit.h) on the GPU of this process's local rank.
#pragma once
#include <functional>
#include <string>

#include "cli_options.h"
#include "kvlab/attention_unit.h"

namespace kvlab::cli {

struct StudyDevice {
  AttentionBackend backend;              // empty: the CPU kernel
  std::function<std::string()> summary;  // the GPU's name and seconds, for stderr; empty on the CPU
};

// Throws std::runtime_error for cuda without CUDA at build time or without a usable GPU.
StudyDevice open_study_device(const std::string& device);

void add_device_option(CLI::App* c, std::string& device);

}  // namespace kvlab::cli
