// Public attention entry points on tensors in memory: shape checks, then the head-group runner.
#include "kvlab/attention.h"

#include <stdexcept>

#include "group.h"
#include "kvlab/attention_unit.h"

namespace kvlab {

namespace {

struct Dims {
  int64_t Hq, Hkv, T, D;
};

Dims check(const TensorView& q, const TensorView& k, const TensorView& v,
           const std::vector<int64_t>& positions, const std::string& where) {
  auto fail = [&](const std::string& why) { throw std::invalid_argument(where + ": " + why); };
  if (q.shape.size() != 3 || k.shape.size() != 3)
    fail("q " + shape_string(q.shape) + " and k " + shape_string(k.shape) + " must be (heads, T, D)");
  if (k.shape != v.shape)
    fail("k " + shape_string(k.shape) + " and v " + shape_string(v.shape) + " differ in shape");
  const Dims d{q.shape[0], k.shape[0], k.shape[1], k.shape[2]};
  if (q.shape[1] != d.T || q.shape[2] != d.D)
    fail("q " + shape_string(q.shape) + " does not match k " + shape_string(k.shape) + " in T or D");
  if (d.Hq <= 0 || d.Hkv <= 0 || d.T <= 0 || d.D <= 0) fail("empty tensors " + shape_string(k.shape));
  if (d.Hq % d.Hkv != 0)
    fail(std::to_string(d.Hq) + " query heads are not a multiple of " + std::to_string(d.Hkv) + " KV heads");
  if (positions.empty()) fail("no query positions");
  for (size_t i = 0; i < positions.size(); ++i)
    if (positions[i] < 0 || positions[i] >= d.T || (i && positions[i] <= positions[i - 1]))
      fail("query positions must ascend strictly within [0, " + std::to_string(d.T) + "); position " +
           std::to_string(i) + " is " + std::to_string(positions[i]));
  return d;
}

std::vector<float> to_f32(const TensorView& x) {
  std::vector<float> out(x.numel());
  if (x.dtype == DType::F32) {
    const float* p = static_cast<const float*>(x.data);
    out.assign(p, p + out.size());
  } else {
    for (int64_t i = 0; i < (int64_t)out.size(); ++i) out[i] = x.at(i);
  }
  return out;
}

// Scaled selected queries of every head: (Hq, N, D).
std::vector<float> scaled_queries(const std::vector<float>& q, const Dims& d,
                                  const std::vector<int64_t>& positions) {
  const int64_t N = positions.size();
  std::vector<float> out(d.Hq * N * d.D);
  for (int64_t h = 0; h < d.Hq; ++h)
    detail::gather_scaled(&q[h * d.T * d.D], positions, d.D, &out[h * N * d.D]);
  return out;
}

// The job of KV head g: its query heads' rows of qs (group * N of them) and its keys and values.
detail::GroupJob group_job(const std::vector<float>& qs, const std::vector<float>& kf,
                           const std::vector<float>& vf, const Dims& d, int64_t g,
                           const std::vector<int64_t>& positions, const AttentionTiles& tiles) {
  const int64_t N = positions.size(), group = d.Hq / d.Hkv;
  detail::GroupJob job;
  job.q = &qs[g * group * N * d.D];
  job.heads = group;
  job.N = N;
  job.D = d.D;
  job.pos = positions.data();
  job.k = &kf[g * d.T * d.D];
  job.v = &vf[g * d.T * d.D];
  job.tiles = tiles;
  return job;
}

}  // namespace

void AttentionTimes::merge(const AttentionTimes& o) {
  gemm_qk += o.gemm_qk;
  gemm_pv += o.gemm_pv;
  softmax += o.softmax;
  metrics += o.metrics;
  topk += o.topk;
}

Tensor attention(const TensorView& q, const TensorView& k, const TensorView& v,
                 const std::vector<int64_t>& positions, const AttentionTiles& tiles) {
  const Dims d = check(q, k, v, positions, "attention");
  const std::vector<float> kf = to_f32(k), vf = to_f32(v), qs = scaled_queries(to_f32(q), d, positions);
  const int64_t N = positions.size(), group = d.Hq / d.Hkv;
  Tensor out;
  out.shape = {d.Hq, N, d.D};
  out.data.resize(d.Hq * N * d.D);
  for (int64_t g = 0; g < d.Hkv; ++g) {
    detail::GroupJob job = group_job(qs, kf, vf, d, g, positions, tiles);
    detail::GroupResult res;
    detail::run_group(job, res, &out.data[g * group * N * d.D], nullptr);
  }
  return out;
}

std::vector<std::vector<AttnStats>> attention_errors(const TensorView& q, const TensorView& k,
                                                     const TensorView& v,
                                                     const std::vector<Reconstruction>& caches,
                                                     const std::vector<int64_t>& positions,
                                                     const AttentionTiles& tiles) {
  return attention_errors(q, k, v, caches, positions, AttentionBackend{}, tiles);
}

std::vector<std::vector<AttnStats>> attention_errors(
    const TensorView& q, const TensorView& k, const TensorView& v, const std::vector<Reconstruction>& caches,
    const std::vector<int64_t>& positions, const AttentionBackend& backend, const AttentionTiles& tiles) {
  const Dims d = check(q, k, v, positions, "attention_errors");
  for (size_t m = 0; m < caches.size(); ++m)
    if (caches[m].k.shape != k.shape || caches[m].v.shape != k.shape)
      throw std::invalid_argument("attention_errors: cache " + std::to_string(m) + " has k " +
                                  shape_string(caches[m].k.shape) + ", v " + shape_string(caches[m].v.shape) +
                                  "; expected " + shape_string(k.shape));
  const std::vector<float> kf = to_f32(k), vf = to_f32(v), qs = scaled_queries(to_f32(q), d, positions);
  const int64_t group = d.Hq / d.Hkv, TD = d.T * d.D;
  const int M = caches.size();
  std::vector<std::vector<AttnStats>> out(M, std::vector<AttnStats>(d.Hq));
  std::vector<std::vector<float>> dk(M, std::vector<float>(TD));
  for (int64_t g = 0; g < d.Hkv; ++g) {
    detail::GroupJob job = group_job(qs, kf, vf, d, g, positions, tiles);
    for (int m = 0; m < M; ++m) {
      for (int64_t i = 0; i < TD; ++i) dk[m][i] = kf[g * TD + i] - caches[m].k.data[g * TD + i];
      job.methods.push_back({dk[m].data(), &caches[m].v.data[g * TD]});
    }
    detail::GroupResult res;
    if (backend)
      backend(job, res, nullptr);
    else
      detail::run_group(job, res, nullptr, nullptr);
    for (int m = 0; m < M; ++m)
      for (int64_t h = 0; h < group; ++h) out[m][g * group + h] = res.stats[m][h];
  }
  return out;
}

}  // namespace kvlab
