// `--device cpu|cuda`, `--share-gpu` and `--methods-on` of the study commands (eval, boost-sweep,
// sensitivity): the backends that compute attention units (kvlab/attention_unit.h) and
// sensitivity units (kvlab/sensitivity.h), and the codec that applies the methods
// (kvlab/codec.h), on the GPU of this process's local rank.
#pragma once
#include <functional>
#include <memory>
#include <string>

#include "cli_options.h"
#include "kvlab/attention_unit.h"
#include "kvlab/sensitivity.h"

namespace kvlab::cli {

struct DeviceArgs {
  std::string device = "cpu";
  bool share = false;      // ranks of a node may share GPUs (local rank mod GPU count)
  std::string methods_on;  // where methods quantize: cpu or cuda; empty: as device
};

struct StudyDevice {
  AttentionBackend backend;              // empty: the CPU kernel
  SensitivityBackend sensitivity;        // empty: the CPU kernel
  std::shared_ptr<const Codec> codec;    // methods' quantize -> dequantize; null: core on the CPU
  std::function<std::string()> summary;  // the GPU's name and seconds, for stderr; empty on the CPU
};

// Throws std::runtime_error for cuda without CUDA at build time or without a usable GPU, and
// naming the rank and host where a node has fewer GPUs than ranks (unless shared).
StudyDevice open_study_device(const DeviceArgs& a);

void add_device_option(CLI::App* c, DeviceArgs& a);

}  // namespace kvlab::cli
