// eval's attention unit (kvlab/attention_unit.h) on a CUDA device: `kvlab eval --device cuda`.
//
// The reference and every method's logits and outputs are fp64 GEMMs (cuBLAS), the softmax,
// score, KL and top-k sums fp64 row kernels, so the sums agree with the CPU kernel (fp32 GEMMs,
// fp64 sums) to the CPU's own rounding (bound and measurement: docs/EVAL_JSON.md, "Devices").
// Device memory: the unit's q, K, V and caches in fp64, plus three (rows x keys) fp64 tiles whose
// row count adapts to the free memory.
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include "kvlab/attention_unit.h"

namespace kvlab {

// Seconds the device spent, summed over units (host wall clock around synchronous steps).
struct CudaAttentionTimes {
  double upload = 0;   // host -> device copies and fp32 -> fp64 conversion
  double compute = 0;  // GEMMs and row kernels, until the results are back on the host
  int64_t units = 0;
  double gemm_flops = 0;  // fp64 GEMM work, 2 m n k per GEMM
};

class CudaAttention {
 public:
  // Throws std::runtime_error naming the device when CUDA has no such device. tile_elems: fp64
  // elements of each (rows x keys) tile; 0: from the free memory (tests pass small ones to
  // exercise many chunks).
  explicit CudaAttention(int device, int64_t tile_elems = 0);
  ~CudaAttention();
  CudaAttention(const CudaAttention&) = delete;
  CudaAttention& operator=(const CudaAttention&) = delete;

  void run(const AttentionUnit& unit, AttentionUnitResult& result);
  const CudaAttentionTimes& times() const;
  std::string device_name() const;  // "NVIDIA H100 80GB HBM3 (device 0)"

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// A backend for EvalOptions::backend that runs every unit on `gpu`.
AttentionBackend cuda_backend(std::shared_ptr<CudaAttention> gpu);

// The device of this process: its local rank (OMPI_COMM_WORLD_LOCAL_RANK, SLURM_LOCALID,
// MPI_LOCALRANKID) when launched by MPI or Slurm, else 0. Throws std::runtime_error naming the
// rank and host when that node has fewer GPUs than ranks (unless `share`: then local rank mod
// the GPU count, several ranks per GPU), or none.
int cuda_device_for_this_rank(bool share = false);

}  // namespace kvlab
