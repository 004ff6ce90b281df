// kvlab-gpu-kmeans: the GPU k-means (kvlab_gpu/kmeans.h) against the CPU's (vq/, kvlab::kmeans)
// and its speed.
//   --validate: many shapes (d 1..8, 16, 32; k 1..4096; empty clusters; ties), all problems of a
//               shape in one batch; every centroid bit and assignment must equal the CPU's, and
//               nearest_batch's codes and counts must equal kmeans_assign's and their histogram;
//               k-means++ starts drawn on the GPU must equal kmeans_start's, and the runs from them
//               kmeans()'s with KMeansInit::KMeansPP.
//   --bench:    a whole model's CQ-4c8b training (layers x 16 heads x 32 groups of 65,536 x 4 ->
//               256, one launch sequence per layer; k-means++ starts timed apart), then the CPU benchmark's
//               shapes; one head on this machine's CPU for comparison.
// Exit status: 0 ok, 1 mismatch, 2 no CUDA device, 3 usage or error.
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "kvlab/kmeans.h"
#include "kvlab/threads.h"
#include "kvlab_gpu/kmeans.h"

namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

std::vector<float> blobs(int64_t n, int64_t d, int64_t centers, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> g(0.0f, 1.0f);
  std::vector<float> mu(centers * d), x(n * d);
  for (auto& v : mu) v = g(rng) * 3.0f;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t c = rng() % centers;
    for (int64_t j = 0; j < d; ++j) x[i * d + j] = mu[c * d + j] + 0.3f * g(rng);
  }
  for (int64_t i = 1; i < n; i += 97) std::copy(&x[(i - 1) * d], &x[i * d], &x[i * d]);  // exact duplicates
  return x;
}

struct VCase {
  int64_t problems, n, d, k;
  int iters;
};

// Returns the number of mismatches (centroid floats by bits, assignments, codes, counts).
int64_t validate_case(const VCase& c) {
  const kvlab::gpu::KMeansShape s{c.problems, c.n, c.d, c.k};
  std::vector<float> x, init;
  std::mt19937_64 rng(c.n * 31 + c.d * 7 + c.k);
  for (int64_t p = 0; p < c.problems; ++p) {
    const auto xp = blobs(c.n, c.d, std::max<int64_t>(2, c.k / 3), 1000 + p + c.d);
    x.insert(x.end(), xp.begin(), xp.end());
    for (int64_t e = 0; e < c.k; ++e) {  // random points as starts
      const int64_t i = (int64_t)(rng() % c.n);
      init.insert(init.end(), &xp[i * c.d], &xp[(i + 1) * c.d]);
    }
    // start 2 = start 0: exact ties (the lower index wins) and an empty cluster to split
    if (c.k > 2) std::copy(&init[(p * c.k) * c.d], &init[(p * c.k + 1) * c.d], &init[(p * c.k + 2) * c.d]);
  }
  std::vector<float> gc = init;
  std::vector<int32_t> ga(c.problems * c.n);
  const auto t0 = Clock::now();
  kvlab::gpu::kmeans_batch(x.data(), s, c.iters, gc.data(), ga.data());
  const double tg = since(t0);
  std::vector<int32_t> na(c.problems * c.n);
  std::vector<int64_t> counts(c.problems * c.k);
  kvlab::gpu::nearest_batch(x.data(), s, gc.data(), na.data(), counts.data());

  int64_t bad_c = 0, bad_a = 0, bad_n = 0, bad_u = 0;
  const auto t1 = Clock::now();
  for (int64_t p = 0; p < c.problems; ++p) {
    kvlab::KMeansParams kp;
    kp.k = c.k;
    kp.iters = c.iters;
    const auto r = kvlab::kmeans(&x[p * c.n * c.d], c.n, c.d, kp, nullptr, &init[p * c.k * c.d]);
    for (int64_t e = 0; e < c.k * c.d; ++e)
      bad_c += std::memcmp(&r.centroids[e], &gc[p * c.k * c.d + e], sizeof(float)) != 0;
    for (int64_t i = 0; i < c.n; ++i) bad_a += r.assign[i] != ga[p * c.n + i];
    // nearest_batch on the GPU's centroids vs the CPU's kmeans_assign on the same centroids
    std::vector<int32_t> a(c.n);
    kvlab::kmeans_assign(&x[p * c.n * c.d], c.n, c.d, &gc[p * c.k * c.d], c.k, a.data());
    std::vector<int64_t> h(c.k, 0);
    for (int64_t i = 0; i < c.n; ++i) {
      bad_n += a[i] != na[p * c.n + i];
      ++h[a[i]];
    }
    for (int64_t e = 0; e < c.k; ++e) bad_u += h[e] != counts[p * c.k + e];
  }
  const double tc = since(t1);
  const int64_t bad = bad_c + bad_a + bad_n + bad_u;
  std::printf(
      "validate %-4s problems %-3lld n %-6lld d %-2lld k %-5lld iters %-3d: centroid bits %lld/%lld, "
      "assign %lld/%lld, nearest %lld, counts %lld  (gpu %.3f s, cpu %.3f s)\n",
      bad ? "FAIL" : "ok", (long long)c.problems, (long long)c.n, (long long)c.d, (long long)c.k, c.iters,
      (long long)bad_c, (long long)(c.problems * c.k * c.d), (long long)bad_a, (long long)(c.problems * c.n),
      (long long)bad_n, (long long)bad_u, tg, tc);
  std::fflush(stdout);
  return bad;
}

// k-means++ on the GPU against the CPU: the starts (kmeans_start) and the whole run (kmeans() from
// its own k-means++ start) must be identical. distinct > 0: only that many distinct points, so the
// draws run out of mass and the CPU's fill of unchosen points in index order is checked too.
int64_t validate_pp_case(const VCase& c, uint64_t seed, int64_t distinct) {
  const kvlab::gpu::KMeansShape s{c.problems, c.n, c.d, c.k};
  std::vector<float> x;
  for (int64_t p = 0; p < c.problems; ++p) {
    auto xp = blobs(c.n, c.d, std::max<int64_t>(2, c.k / 3), 2000 + p + c.d);
    for (int64_t i = distinct; distinct > 0 && i < c.n; ++i)
      std::copy(&xp[(i % distinct) * c.d], &xp[(i % distinct + 1) * c.d], &xp[i * c.d]);
    x.insert(x.end(), xp.begin(), xp.end());
  }
  std::vector<float> starts(c.problems * c.k * c.d), gc(starts.size());
  std::vector<int32_t> ga(c.problems * c.n);
  kvlab::gpu::KMeansPlusPlus pp;
  pp.seed = seed;
  kvlab::gpu::kmeans_batch(x.data(), s, 0, starts.data(), nullptr, &pp);
  const double ts = pp.seconds;
  kvlab::gpu::kmeans_batch(x.data(), s, c.iters, gc.data(), ga.data(), &pp);
  int64_t bad_s = 0, bad_c = 0, bad_a = 0;
  const auto t1 = Clock::now();
  for (int64_t p = 0; p < c.problems; ++p) {
    kvlab::KMeansParams kp;
    kp.k = c.k;
    kp.iters = c.iters;
    kp.init = kvlab::KMeansInit::KMeansPP;
    kp.seed = seed;
    const float* xp = &x[p * c.n * c.d];
    const auto st = kvlab::kmeans_start(xp, c.n, c.d, kp);
    const auto r = kvlab::kmeans(xp, c.n, c.d, kp);
    for (int64_t e = 0; e < c.k * c.d; ++e) {
      bad_s += std::memcmp(&st[e], &starts[p * c.k * c.d + e], sizeof(float)) != 0;
      bad_c += std::memcmp(&r.centroids[e], &gc[p * c.k * c.d + e], sizeof(float)) != 0;
    }
    for (int64_t i = 0; i < c.n; ++i) bad_a += r.assign[i] != ga[p * c.n + i];
  }
  const int64_t bad = bad_s + bad_c + bad_a;
  std::printf(
      "validate %-4s k-means++ seed %-4llu distinct %-3lld problems %-3lld n %-6lld d %-2lld k %-5lld iters "
      "%-3d: "
      "start bits %lld, centroid bits %lld/%lld, assign %lld/%lld  (gpu starts %.3f s, cpu %.3f s)\n",
      bad ? "FAIL" : "ok", (unsigned long long)seed, (long long)distinct, (long long)c.problems,
      (long long)c.n, (long long)c.d, (long long)c.k, c.iters, (long long)bad_s, (long long)bad_c,
      (long long)(c.problems * c.k * c.d), (long long)bad_a, (long long)(c.problems * c.n), ts, since(t1));
  std::fflush(stdout);
  return bad;
}

int validate() {
  const std::vector<VCase> cases = {{4, 4096, 4, 256, 8},   {3, 3000, 1, 16, 10},  {3, 3000, 2, 64, 10},
                                    {2, 2000, 3, 100, 6},   {2, 1500, 5, 300, 6},  {2, 2500, 6, 33, 5},
                                    {2, 2000, 7, 17, 5},    {1, 8192, 8, 4096, 3}, {2, 3000, 16, 200, 5},
                                    {2, 2000, 32, 300, 4},  {2, 1000, 2, 1, 3},    {3, 500, 4, 256, 10},
                                    {32, 65536, 4, 256, 20}};
  int64_t bad = 0;
  for (const auto& c : cases) bad += validate_case(c);
  // k-means++ (seed, distinct points; 0: all): one chunk and several, a partial last chunk, k = 1,
  // duplicates (blobs), too few distinct points for k, another seed, a whole layer of problems.
  struct PPCase {
    VCase c;
    uint64_t seed;
    int64_t distinct;
  };
  const std::vector<PPCase> pp = {
      {{4, 4096, 4, 256, 5}, 0, 0},  {{3, 10000, 1, 16, 5}, 0, 0},    {{3, 9000, 2, 64, 4}, 7, 0},
      {{2, 5000, 3, 100, 3}, 0, 0},  {{2, 3000, 8, 300, 3}, 1234, 0}, {{2, 12289, 16, 200, 3}, 0, 0},
      {{2, 2000, 32, 300, 2}, 0, 0}, {{2, 1000, 5, 1, 2}, 0, 0},      {{3, 600, 4, 64, 3}, 0, 20},
      {{2, 700, 6, 16, 2}, 3, 1},    {{16, 65536, 4, 256, 2}, 0, 0}};
  for (const auto& q : pp) bad += validate_pp_case(q.c, q.seed, q.distinct);
  std::printf("validate: %s (%lld mismatches over %zu shapes)\n", bad ? "FAILED" : "all identical",
              (long long)bad, cases.size() + pp.size());
  return bad ? 1 : 0;
}

double gpu_fp32_peak_tflops() {
  int dev = 0, sms = 0, khz = 0;
  cudaGetDevice(&dev);
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
  cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, dev);
  return 2.0 * 128 * sms * khz * 1e3 / 1e12;  // 128 FP32 lanes per SM (sm_90), 2 flops per FMA
}

template <class T>
T* device_alloc(size_t count) {
  T* p = nullptr;
  if (cudaMalloc(&p, count * sizeof(T)) != cudaSuccess) throw std::runtime_error("cudaMalloc failed");
  return p;
}

int bench(int layers, int64_t tokens, int heads, int repeats) {
  const double peak = gpu_fp32_peak_tflops();
  std::printf("bench: fp32 peak %.1f TFLOP/s (SMs x 128 lanes x max clock); %%peak = 2 n k d iters / time\n",
              peak);
  // 1. The whole model: one launch sequence per layer (heads x 32 groups problems).
  {
    const kvlab::gpu::KMeansShape s{(int64_t)heads * 32, tokens, 4, 256};
    float* x = device_alloc<float>(s.problems * s.n * s.d);
    float* c = device_alloc<float>(s.problems * s.k * s.d);
    int32_t* a = device_alloc<int32_t>(s.problems * s.n);
    double train = 0, fill = 0, starts = 0;
    for (int l = 0; l < layers; ++l) {
      auto t0 = Clock::now();
      kvlab::gpu::fill_kmeans_bench(x, c, s, 64, 1000 + l);
      fill += since(t0);
      t0 = Clock::now();
      kvlab::gpu::kmeanspp_device(x, s, 0, c);
      starts += since(t0);
      t0 = Clock::now();
      kvlab::gpu::kmeans_batch_device(x, s, 20, c, a);
      train += since(t0);
    }
    std::printf("model CQ-4c8b: k-means++ starts on the GPU %.2f s (%d layers, %.1f ms per layer)\n", starts,
                layers, 1e3 * starts / layers);
    // What the data's trip from host memory would add: one layer copied from pageable memory.
    std::vector<float> host(s.problems * s.n * s.d, 1.0f);
    auto t0 = Clock::now();
    cudaMemcpy(x, host.data(), host.size() * sizeof(float), cudaMemcpyHostToDevice);
    cudaDeviceSynchronize();
    const double copy = since(t0);
    const double work = 2.0 * s.problems * s.n * s.k * s.d * 20 * layers;
    std::printf(
        "model CQ-4c8b: %d layers x %d heads x 32 groups = %lld problems of %lld x 4 -> 256, 20 iters: "
        "%.2f s training (%.1f%% of fp32 peak), + %.2f s to copy every layer from host memory "
        "(%.2f GB/s measured on one), data generation %.2f s not counted\n",
        layers, heads, (long long)(s.problems * layers), (long long)s.n, train,
        100 * work / train / 1e12 / peak, copy * layers, host.size() * 4.0 / copy / 1e9, fill);
    // The same head on the CPU (all host threads), for scale.
    std::vector<float> hx(32 * s.n * 4), hc(32 * 256 * 4);
    cudaMemcpy(hx.data(), x, hx.size() * sizeof(float), cudaMemcpyDeviceToHost);
    kvlab::gpu::fill_kmeans_bench(x, c, s, 64, 1000);
    cudaMemcpy(hx.data(), x, hx.size() * sizeof(float), cudaMemcpyDeviceToHost);
    cudaMemcpy(hc.data(), c, hc.size() * sizeof(float), cudaMemcpyDeviceToHost);
    std::vector<kvlab::KMeansProblem> probs;
    for (int g = 0; g < 32; ++g) probs.push_back({&hx[g * s.n * 4], s.n, 4, nullptr, &hc[g * 256 * 4]});
    kvlab::KMeansParams kp;
    kp.k = 256;
    kp.iters = 20;
    t0 = Clock::now();
    kvlab::kmeans_batch(probs, kp);
    const double cpu = since(t0);
    std::printf("cpu (%d threads), one head (32 problems): %.2f s; x %lld heads = %.0f s\n",
                kvlab::resolve_threads(0), cpu, (long long)heads * layers, cpu * heads * layers);
    cudaFree(x);
    cudaFree(c);
    cudaFree(a);
  }
  // 2. The CPU benchmark's shapes (kvlab_bench_kmeans_faiss), 20 iterations, median of `repeats`.
  struct BCase {
    const char* name;
    int64_t problems, n, d, k;
  };
  const std::vector<BCase> cases = {
      {"1Mx4", 1, 1000000, 4, 256},  {"100Kx8", 1, 100000, 8, 4096},  {"cq4c8b", 32, 65536, 4, 256},
      {"d2k16", 1, 100000, 2, 16},   {"d2k256", 1, 100000, 2, 256},   {"d2k4096", 1, 100000, 2, 4096},
      {"d16k16", 1, 100000, 16, 16}, {"d16k256", 1, 100000, 16, 256}, {"d16k4096", 1, 100000, 16, 4096},
      {"d32k16", 1, 100000, 32, 16}, {"d32k256", 1, 100000, 32, 256}, {"d32k4096", 1, 100000, 32, 4096}};
  for (const auto& bc : cases) {
    const kvlab::gpu::KMeansShape s{bc.problems, bc.n, bc.d, bc.k};
    float* x = device_alloc<float>(s.problems * s.n * s.d);
    float* c = device_alloc<float>(s.problems * s.k * s.d);
    int32_t* a = device_alloc<int32_t>(s.problems * s.n);
    std::vector<double> t;
    for (int r = 0; r < repeats; ++r) {
      kvlab::gpu::fill_kmeans_bench(x, c, s, 4 * s.k, 42);
      const auto t0 = Clock::now();
      kvlab::gpu::kmeans_batch_device(x, s, 20, c, a);
      t.push_back(since(t0));
    }
    std::sort(t.begin(), t.end());
    const double med = t[t.size() / 2], work = 2.0 * s.problems * s.n * s.k * s.d * 20;
    std::printf(
        "%-9s problems %-3lld n %-8lld d %-3lld k %-5lld 20 iters: median %.4f s (%.1f%% of fp32 peak)\n",
        bc.name, (long long)s.problems, (long long)s.n, (long long)s.d, (long long)s.k, med,
        100 * work / med / 1e12 / peak);
    cudaFree(x);
    cudaFree(c);
    cudaFree(a);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  bool do_validate = false, do_bench = false;
  int layers = 32, heads = 16, repeats = 3;
  int64_t tokens = 65536;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--validate")
      do_validate = true;
    else if (a == "--bench")
      do_bench = true;
    else if (a == "--layers" && i + 1 < argc)
      layers = std::atoi(argv[++i]);
    else if (a == "--heads" && i + 1 < argc)
      heads = std::atoi(argv[++i]);
    else if (a == "--tokens" && i + 1 < argc)
      tokens = std::atoll(argv[++i]);
    else if (a == "--repeats" && i + 1 < argc)
      repeats = std::atoi(argv[++i]);
    else {
      std::fprintf(
          stderr,
          "usage: %s [--validate] [--bench [--layers 32] [--heads 16] [--tokens 65536] [--repeats 3]]\n",
          argv[0]);
      return 3;
    }
  }
  if (layers < 1 || heads < 1 || tokens < 256 || repeats < 1) {
    std::fprintf(stderr, "%s: --layers, --heads, --repeats must be >= 1 and --tokens >= 256\n", argv[0]);
    return 3;
  }
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::fprintf(stderr, "%s: no CUDA device\n", argv[0]);
    return 2;
  }
  cudaDeviceProp prop{};
  cudaGetDeviceProperties(&prop, 0);
  std::printf("device: %s\n", prop.name);
  try {
    int rc = 0;
    if (do_validate) rc = validate();
    if (do_bench) rc = std::max(rc, bench(layers, tokens, heads, repeats));
    if (!do_validate && !do_bench) std::fprintf(stderr, "%s: nothing to do (--validate, --bench)\n", argv[0]);
    return rc;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: %s\n", argv[0], e.what());
    return 3;
  }
}
