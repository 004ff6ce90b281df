// Shared by the GPU k-means files (kmeans.cu, kmeans_pp.cu): error checks and an owning device
// buffer.
#pragma once
#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

namespace kvlab::gpu::detail {

inline void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess)
    throw std::runtime_error(std::string("gpu kmeans: ") + what + ": " + cudaGetErrorString(e));
}

template <class T>
struct DeviceBuffer {
  T* p = nullptr;
  explicit DeviceBuffer(size_t count) {
    if (count) check(cudaMalloc(&p, count * sizeof(T)), "cudaMalloc");
  }
  ~DeviceBuffer() { cudaFree(p); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
};

}  // namespace kvlab::gpu::detail
