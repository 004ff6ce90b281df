// Channel sensitivity's sums (kvlab/sensitivity.h, SensitivityUnit) on a CUDA device:
// `kvlab sensitivity --device cuda`. The logits are cuBLAS fp64 GEMMs, the softmax and the
// per-(query, channel) sums A, B, C fp64 kernels with the CPU's expm1 polynomials; the CPU
// finishes every row as it does its own (bound: docs/EVAL_JSON.md, "Devices").
// Device memory: the unit's queries, keys and K_hat - K in fp64, and one (queries x keys) fp64
// tile whose row count adapts to the free memory.
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include "kvlab/sensitivity.h"

namespace kvlab {

struct CudaSensitivityTimes {
  double upload = 0;   // host -> device copies
  double compute = 0;  // GEMMs and kernels, until the sums are back on the host
  int64_t units = 0;
};

class CudaSensitivity {
 public:
  // Throws std::runtime_error naming the device when CUDA has no such device. tile_elems: fp64
  // elements of the (queries x keys) tile; 0: from the free memory (tests pass small ones).
  explicit CudaSensitivity(int device, int64_t tile_elems = 0);
  ~CudaSensitivity();
  CudaSensitivity(const CudaSensitivity&) = delete;
  CudaSensitivity& operator=(const CudaSensitivity&) = delete;

  void run(const SensitivityUnit& unit, std::vector<double>& abc, std::vector<double>& s0);
  const CudaSensitivityTimes& times() const;
  std::string device_name() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// A backend for SensitivityOptions::backend that runs every unit on `gpu`.
SensitivityBackend cuda_sensitivity_backend(std::shared_ptr<CudaSensitivity> gpu);

}  // namespace kvlab
