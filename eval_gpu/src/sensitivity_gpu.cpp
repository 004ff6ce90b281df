// The CUDA sensitivity unit: per query head, chunks of queries through one logit tile (cuBLAS
// fp64 GEMM, softmax in place, channel sums), the sums downloaded for the CPU's finish.
#include "kvlab_eval_gpu/sensitivity_gpu.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <vector>

#include "cuda_util.h"
#include "sensitivity_kernels.h"

namespace kvlab {

using gpu_eval::check;
using gpu_eval::DeviceArray;

struct CudaSensitivity::Impl {
  int device = 0;
  int64_t tile_elems = 0;
  cudaStream_t stream = nullptr;
  cublasHandle_t blas = nullptr;
  CudaSensitivityTimes times;
  DeviceArray<float> q32;
  DeviceArray<double> qs, k, delta, absmax, S, abc, s0;
  DeviceArray<int32_t> vis;

  template <class T>
  void upload(T* dst, const T* src, int64_t n) {
    check(cudaMemcpyAsync(dst, src, n * sizeof(T), cudaMemcpyHostToDevice, stream), "upload");
  }
};

CudaSensitivity::CudaSensitivity(int device, int64_t tile_elems) : impl_(std::make_unique<Impl>()) {
  impl_->tile_elems = tile_elems;
  gpu_eval::open_device(device);
  impl_->device = device;
  check(cudaStreamCreateWithFlags(&impl_->stream, cudaStreamNonBlocking), "cudaStreamCreate");
  check(cublasCreate(&impl_->blas), "cublasCreate");
  check(cublasSetStream(impl_->blas, impl_->stream), "cublasSetStream");
}

CudaSensitivity::~CudaSensitivity() {
  if (impl_->blas) cublasDestroy(impl_->blas);
  if (impl_->stream) cudaStreamDestroy(impl_->stream);
}

const CudaSensitivityTimes& CudaSensitivity::times() const { return impl_->times; }

std::string CudaSensitivity::device_name() const {
  cudaDeviceProp p{};
  cudaGetDeviceProperties(&p, impl_->device);
  return std::string(p.name) + " (device " + std::to_string(impl_->device) + ")";
}

void CudaSensitivity::run(const SensitivityUnit& u, std::vector<double>& abc, std::vector<double>& s0) {
  using Clock = std::chrono::steady_clock;
  Impl& g = *impl_;
  const int64_t H = u.heads, N = u.count, D = u.D, R = H * N, n = u.n, kb = u.kb;
  abc.assign(R * D * 3, 0.0);
  s0.assign(R, 0.0);
  if (R == 0) return;
  check(cudaSetDevice(g.device), "cudaSetDevice");
  const auto t0 = Clock::now();
  const int64_t nk_all = u.positions[N - 1] + 1;
  // The selected queries, gathered here (fp32), scaled to fp64 there; keys and deltas as fp64.
  std::vector<float> qsel(R * D);
  std::vector<int32_t> vis_h(R);
  for (int64_t h = 0; h < H; ++h)
    for (int64_t i = 0; i < N; ++i) {
      std::copy_n(u.q + (h * u.T + u.positions[i]) * D, D, &qsel[(h * N + i) * D]);
      vis_h[h * N + i] = (int32_t)(u.positions[i] + 1);
    }
  float* q32 = g.q32.get(R * D, "the queries");
  double* qs = g.qs.get(R * D, "the scaled queries");
  double* k = g.k.get(nk_all * D, "K");
  double* delta = g.delta.get(D * n, "K_hat - K");
  double* absmax = g.absmax.get(D, "max |K_hat - K|");
  int32_t* vis = g.vis.get(R, "row lengths");
  g.upload(q32, qsel.data(), R * D);
  g.upload(k, u.k, nk_all * D);
  g.upload(delta, u.delta, D * n);
  g.upload(absmax, u.delta_absmax, D);
  g.upload(vis, vis_h.data(), R);
  gpu_eval::scale_to_f64(q32, qs, R * D, 1.0 / std::sqrt((double)D), g.stream);
  check(cudaStreamSynchronize(g.stream), "upload");
  const auto t1 = Clock::now();
  g.times.upload += std::chrono::duration<double>(t1 - t0).count();

  // Rows of one query head at a time, as many as fit one tile of at most ~1/4 of the free memory.
  const int64_t width = kb + n;  // the softmax's rows reach every quantized key
  const int64_t ld_max = (std::max(nk_all, width) + 1) / 2 * 2;
  size_t free_b = 0, total_b = 0;
  check(cudaMemGetInfo(&free_b, &total_b), "cudaMemGetInfo");
  const int64_t tile_elems =
      g.tile_elems > 0 ? g.tile_elems
                       : std::max<int64_t>(std::min<int64_t>(free_b / 4 / sizeof(double), 1LL << 28), 1);
  const int64_t chunk = std::clamp<int64_t>(tile_elems / ld_max, 1, N);
  double* S = g.S.get(chunk * ld_max, "the logit tile");
  double* abc_d = g.abc.get(R * D * 3, "the channel sums");
  double* s0_d = g.s0.get(R, "the rows' sum of P^2");
  for (int64_t h = 0; h < H; ++h)
    for (int64_t i0 = 0; i0 < N; i0 += chunk) {
      const int64_t m = std::min(chunk, N - i0), r0 = h * N + i0;
      const int64_t nk = u.positions[i0 + m - 1] + 1, ld = (std::max(nk, width) + 1) / 2 * 2;
      // S (nk x m, col-major: each query's logits contiguous) = K Q^T.
      gpu_eval::dgemm(g.blas, CUBLAS_OP_T, nk, m, D, k, D, qs + r0 * D, D, S, ld);
      gpu_eval::softmax_rows(S, ld, ld, vis + r0, m, s0_d + r0, g.stream);
      gpu_eval::channel_sums(S + kb, ld, qs + r0 * D, delta, absmax, m, D, n, abc_d + r0 * D * 3, g.stream);
      check(cudaGetLastError(), "sensitivity kernels");
    }
  check(cudaMemcpyAsync(abc.data(), abc_d, abc.size() * sizeof(double), cudaMemcpyDeviceToHost, g.stream),
        "download");
  check(cudaMemcpyAsync(s0.data(), s0_d, s0.size() * sizeof(double), cudaMemcpyDeviceToHost, g.stream),
        "download");
  check(cudaStreamSynchronize(g.stream), "sensitivity unit");
  g.times.compute += std::chrono::duration<double>(Clock::now() - t1).count();
  g.times.units += 1;
}

SensitivityBackend cuda_sensitivity_backend(std::shared_ptr<CudaSensitivity> gpu) {
  return [gpu](const SensitivityUnit& u, std::vector<double>& abc, std::vector<double>& s0) {
    gpu->run(u, abc, s0);
  };
}

}  // namespace kvlab
