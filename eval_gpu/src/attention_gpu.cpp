// The CUDA attention unit: uploads, cuBLAS fp64 GEMMs over chunks of query rows, row kernels
// (unit_kernels.cu), per-row results summed on the host in row order.
#include "kvlab_eval_gpu/attention_gpu.h"

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <vector>

#include "cuda_util.h"
#include "unit_kernels.h"

namespace kvlab {

namespace {

using gpu_eval::check;
using gpu_eval::DeviceArray;
using gpu_eval::dgemm;
using Clock = std::chrono::steady_clock;
double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

}  // namespace

struct CudaAttention::Impl {
  int device = 0;
  int64_t tile_elems = 0;
  cudaStream_t stream = nullptr;
  cublasHandle_t blas = nullptr;
  CudaAttentionTimes times;
  DeviceArray<float> stage, q32;
  DeviceArray<double> k, v, dk, vh, q, S, P, H, O, Oh, m, lz, rows_out;
  DeviceArray<int32_t> vis, top;

  // fp32 host -> fp64 device, through a staging buffer.
  void upload(const float* src, int64_t n, double* dst) {
    float* s = stage.get(n, "the upload staging buffer");
    check(cudaMemcpyAsync(s, src, n * sizeof(float), cudaMemcpyHostToDevice, stream), "upload");
    gpu_eval::to_f64(s, dst, n, stream);
    check(cudaStreamSynchronize(stream), "upload conversion");
  }
};

CudaAttention::CudaAttention(int device, int64_t tile_elems) : impl_(std::make_unique<Impl>()) {
  impl_->tile_elems = tile_elems;
  gpu_eval::open_device(device);
  impl_->device = device;
  check(cudaStreamCreateWithFlags(&impl_->stream, cudaStreamNonBlocking), "cudaStreamCreate");
  check(cublasCreate(&impl_->blas), "cublasCreate");
  check(cublasSetStream(impl_->blas, impl_->stream), "cublasSetStream");
}

CudaAttention::~CudaAttention() {
  if (impl_->blas) cublasDestroy(impl_->blas);
  if (impl_->stream) cudaStreamDestroy(impl_->stream);
}

const CudaAttentionTimes& CudaAttention::times() const { return impl_->times; }

std::string CudaAttention::device_name() const {
  cudaDeviceProp p{};
  cudaGetDeviceProperties(&p, impl_->device);
  return std::string(p.name) + " (device " + std::to_string(impl_->device) + ")";
}

void CudaAttention::run(const AttentionUnit& u, AttentionUnitResult& res) {
  Impl& g = *impl_;
  check(cudaSetDevice(g.device), "cudaSetDevice");
  const auto t0 = Clock::now();
  const int64_t Hh = u.heads, N = u.N, D = u.D, M = u.methods.size(), R = N * Hh;
  const int64_t nk_all = u.pos[N - 1] + 1;
  const int64_t KD = nk_all * D;

  // Inputs: q stays fp32 (stacked per chunk), K, V and every cache fp64.
  float* q32 = g.q32.get(R * D, "the queries");
  check(cudaMemcpyAsync(q32, u.q, R * D * sizeof(float), cudaMemcpyHostToDevice, g.stream), "upload q");
  double* k = g.k.get(KD, "K");
  double* v = g.v.get(KD, "V");
  g.upload(u.k, KD, k);
  g.upload(u.v, KD, v);
  double* dk = g.dk.get(std::max<int64_t>(M, 1) * KD, "the methods' K - K_hat");
  double* vh = g.vh.get(std::max<int64_t>(M, 1) * KD, "the methods' V_hat");
  for (int64_t mi = 0; mi < M; ++mi) {
    g.upload(u.methods[mi].dk, KD, dk + mi * KD);
    g.upload(u.methods[mi].v_hat, KD, vh + mi * KD);
  }
  std::vector<int32_t> vis_h(R);
  for (int64_t i = 0; i < N; ++i)
    for (int64_t h = 0; h < Hh; ++h) vis_h[i * Hh + h] = (int32_t)(u.pos[i] + 1);
  int32_t* vis = g.vis.get(R, "row lengths");
  check(cudaMemcpyAsync(vis, vis_h.data(), R * sizeof(int32_t), cudaMemcpyHostToDevice, g.stream), "upload");
  check(cudaStreamSynchronize(g.stream), "upload");
  const auto t1 = Clock::now();
  g.times.upload += std::chrono::duration<double>(t1 - t0).count();

  // Per-row results: [0, R): ||O||^2; then per method 4 per row: score, KL, top-k, ||O - O_hat||^2.
  const int64_t stride = 1 + 4 * M;
  double* out = g.rows_out.get(R * stride, "per-row results");
  double* m = g.m.get(R, "row maxima");
  double* lz = g.lz.get(R, "row normalizers");
  int32_t* top = g.top.get(R * gpu_eval::kTop, "top-k indices");

  // Chunks of whole positions (all heads), three (rows x nk) fp64 tiles of at most ~1/8 of the
  // free memory each.
  size_t free_b = 0, total_b = 0;
  check(cudaMemGetInfo(&free_b, &total_b), "cudaMemGetInfo");
  const int64_t tile_elems =
      g.tile_elems > 0 ? g.tile_elems
                       : std::max<int64_t>(std::min<int64_t>(free_b / 8 / sizeof(double), 1LL << 27), 1);
  const int64_t ld_all = (nk_all + 1) / 2 * 2;
  const int64_t per_pos = Hh * ld_all;
  const int64_t chunk_pos = std::clamp<int64_t>(tile_elems / per_pos, 1, N);
  for (int64_t i0 = 0; i0 < N; i0 += chunk_pos) {
    const int64_t n = std::min(chunk_pos, N - i0), rows = n * Hh, r0 = i0 * Hh;
    const int64_t nk = u.pos[i0 + n - 1] + 1, ld = (nk + 1) / 2 * 2;
    double* q = g.q.get(chunk_pos * Hh * D, "stacked queries");
    double* S = g.S.get(chunk_pos * per_pos, "the logit tile");
    double* P = g.P.get(chunk_pos * per_pos, "the probability tile");
    double* H = g.H.get(chunk_pos * per_pos, "the method tile");
    double* O = g.O.get(chunk_pos * Hh * D, "outputs");
    double* Oh = g.Oh.get(chunk_pos * Hh * D, "method outputs");
    gpu_eval::stack_queries(q32, Hh, N, i0, n, D, q, g.stream);
    // S (nk x rows, col-major; row r's logits contiguous) = K Q^T.
    dgemm(g.blas, CUBLAS_OP_T, nk, rows, D, k, D, q, D, S, ld);
    gpu_eval::reference_rows(S, P, ld, nk, vis + r0, rows, m + r0, lz + r0, top + r0 * gpu_eval::kTop,
                             g.stream);
    // O (D x rows, col-major = rows x D row-major) = V^T P.
    dgemm(g.blas, CUBLAS_OP_N, D, rows, nk, v, D, P, ld, O, D);
    gpu_eval::output_rows(O, nullptr, rows, D, out + r0, g.stream);
    for (int64_t mi = 0; mi < M; ++mi) {
      double* mo = out + R + mi * 4 * R;  // score, KL, top-k interleaved (3 per row), then ||dO||^2
      dgemm(g.blas, CUBLAS_OP_T, nk, rows, D, dk + mi * KD, D, q, D, H, ld);
      gpu_eval::method_rows(S, H, ld, nk, vis + r0, rows, m + r0, lz + r0, top + r0 * gpu_eval::kTop,
                            mo + r0 * 3, g.stream);
      dgemm(g.blas, CUBLAS_OP_N, D, rows, nk, vh + mi * KD, D, H, ld, Oh, D);
      gpu_eval::output_rows(O, Oh, rows, D, mo + 3 * R + r0, g.stream);
      g.times.gemm_flops += 4.0 * (double)nk * rows * D;
    }
    g.times.gemm_flops += 4.0 * (double)nk * rows * D;
    check(cudaGetLastError(), "row kernels");
  }
  std::vector<double> host(R * stride);
  check(cudaMemcpyAsync(host.data(), out, host.size() * sizeof(double), cudaMemcpyDeviceToHost, g.stream),
        "download");
  check(cudaStreamSynchronize(g.stream), "attention unit");
  g.times.compute += since(t1);
  g.times.units += 1;

  // Per head, in row order.
  res.stats.assign(M, std::vector<AttnStats>(Hh));
  res.ref_sq.assign(Hh, 0.0);
  for (int64_t r = 0; r < R; ++r) {
    const int64_t h = r % Hh, visible = vis_h[r];
    const double osq = host[r];
    res.ref_sq[h] += osq;
    for (int64_t mi = 0; mi < M; ++mi) {
      const double* mo = host.data() + R + mi * 4 * R;
      AttnStats& s = res.stats[mi][h];
      s.score_sq_err += std::max(0.0, mo[r * 3 + 0]);
      s.score_count += visible;
      s.kl_sum += std::max(0.0, mo[r * 3 + 1]);  // >= 0 exactly; rounding can dip below zero
      s.topk_sum += mo[r * 3 + 2];
      s.out_sq_err += mo[3 * R + r];
      s.out_sq_ref += osq;
      s.queries += 1;
    }
  }
}

AttentionBackend cuda_backend(std::shared_ptr<CudaAttention> gpu) {
  return [gpu](const AttentionUnit& u, AttentionUnitResult& r, AttentionTimes*) { gpu->run(u, r); };
}

namespace gpu_eval {
void open_device(int device) {
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess || count == 0)
    throw std::runtime_error(std::string("--device cuda: no CUDA device is usable (") +
                             (e != cudaSuccess ? cudaGetErrorString(e) : "none found") + ")");
  if (device < 0 || device >= count)
    throw std::runtime_error("--device cuda: device " + std::to_string(device) + " does not exist (" +
                             std::to_string(count) + " found)");
  check(cudaSetDevice(device), "cudaSetDevice");
}
}  // namespace gpu_eval

int cuda_device_for_this_rank(bool share) {
  int rank = 0;
  const char* var = nullptr;
  for (const char* name : {"OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID", "MPI_LOCALRANKID"})
    if (const char* s = std::getenv(name)) {
      rank = std::atoi(s);
      var = name;
      break;
    }
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  char host[256] = "?";
  gethostname(host, sizeof host - 1);
  if (e != cudaSuccess || count == 0)
    throw std::runtime_error(std::string("--device cuda: no CUDA device is usable on host ") + host + " (" +
                             (e != cudaSuccess ? cudaGetErrorString(e) : "none found") + ")");
  if (rank < 0)
    throw std::runtime_error(std::string("--device cuda: ") + var + " is " + std::to_string(rank) +
                             " on host " + host + "; expected a local rank >= 0");
  if (rank >= count && share) return rank % count;
  if (rank >= count)
    throw std::runtime_error("--device cuda: local rank " + std::to_string(rank) + " (" + var + ") on host " +
                             host + " has no GPU of its own: " + std::to_string(count) +
                             " GPUs for more ranks on this node (--share-gpu lets ranks share them)");
  return rank;
}

}  // namespace kvlab
