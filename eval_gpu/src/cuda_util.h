// Helpers shared by the CUDA study units (attention_gpu.cpp, sensitivity_gpu.cpp): error checks
// that name the step, a device array that only grows, cuBLAS's fp64 GEMM.
#pragma once
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <stdexcept>
#include <string>

namespace kvlab::gpu_eval {

inline void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess)
    throw std::runtime_error(std::string("--device cuda: ") + what + ": " + cudaGetErrorString(e));
}
inline void check(cublasStatus_t e, const char* what) {
  if (e != CUBLAS_STATUS_SUCCESS)
    throw std::runtime_error(std::string("--device cuda: ") + what + ": cuBLAS status " +
                             std::to_string((int)e));
}

// A device array that only grows.
template <class T>
class DeviceArray {
 public:
  DeviceArray() = default;
  DeviceArray(const DeviceArray&) = delete;
  ~DeviceArray() { cudaFree(p_); }
  T* get(size_t n, const char* what) {
    if (n > n_) {
      cudaFree(p_);
      p_ = nullptr;
      n_ = 0;
      if (cudaMalloc(&p_, n * sizeof(T)) != cudaSuccess) {
        cudaGetLastError();
        throw std::runtime_error("--device cuda: cannot allocate " + std::to_string(n * sizeof(T) >> 20) +
                                 " MiB of device memory for " + what);
      }
      n_ = n;
    }
    return p_;
  }

 private:
  T* p_ = nullptr;
  size_t n_ = 0;
};

// Column-major C (m x n, ldc) = op(A) B with cuBLAS's fp64 GEMM.
inline void dgemm(cublasHandle_t h, cublasOperation_t ta, int64_t m, int64_t n, int64_t k, const double* A,
                  int64_t lda, const double* B, int64_t ldb, double* C, int64_t ldc) {
  const double one = 1, zero = 0;
  check(cublasDgemm(h, ta, CUBLAS_OP_N, (int)m, (int)n, (int)k, &one, A, (int)lda, B, (int)ldb, &zero, C,
                    (int)ldc),
        "cublasDgemm");
}

// The device: `device` must exist; throws naming it otherwise.
void open_device(int device);

}  // namespace kvlab::gpu_eval
