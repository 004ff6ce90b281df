// kvlab's k-means against faiss's Clustering on the same data, the same starting centroids and
// the same number of iterations: wall time (median of --repeats runs) and final MSE per vector,
// both measured with the same evaluator (nearest final centroid, exact squared distance in
// double). faiss is optional: without it (KVLAB_HAVE_FAISS undefined) only kvlab runs.
//   kvlab_bench_kmeans_faiss [--repeats N] [--faiss-repeats N] [--cases a,b,c] [--no-faiss]
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "kvlab/kmeans.h"
#include "kvlab/threads.h"
#ifdef KVLAB_HAVE_FAISS
#include <faiss/Clustering.h>
#include <faiss/IndexFlat.h>
#endif

namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// Clustered data: `centers` Gaussian blobs with random spreads, so k-means has work to do.
std::vector<float> blobs(int64_t n, int64_t d, int64_t centers, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> g(0.0f, 1.0f);
  std::uniform_real_distribution<float> u(0.05f, 0.5f);
  std::vector<float> mu(centers * d), sd(centers);
  for (auto& v : mu) v = g(rng) * 3.0f;
  for (auto& v : sd) v = u(rng);
  std::vector<float> x(n * d);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t c = rng() % centers;
    for (int64_t j = 0; j < d; ++j) x[i * d + j] = mu[c * d + j] + sd[c] * g(rng);
  }
  return x;
}

double mse(const float* x, int64_t n, int64_t d, const std::vector<float>& c, int64_t k) {
  std::vector<int32_t> a(n);
  kvlab::kmeans_assign(x, n, d, c.data(), k, a.data());
  double s = 0;
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < d; ++j) {
      const double t = (double)x[i * d + j] - c[(int64_t)a[i] * d + j];
      s += t * t;
    }
  return s / n;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

struct Case {
  std::string name;
  int64_t n, d, k, groups;  // groups > 1: the columns split into `groups` problems of d / groups
};

// One problem (or `groups` sub-problems): returns centroids per group.
std::vector<std::vector<float>> run_kvlab(const std::vector<std::vector<float>>& xs,
                                          const std::vector<std::vector<float>>& c0, int64_t n, int64_t d,
                                          int64_t k, int iters, int threads,
                                          kvlab::KMeansSplit split = kvlab::KMeansSplit::Largest) {
  kvlab::KMeansParams p;
  p.k = k;
  p.iters = iters;
  p.threads = threads;
  p.split = split;
  std::vector<std::vector<float>> out;
  if (xs.size() == 1) {
    out.push_back(kvlab::kmeans(xs[0].data(), n, d, p, nullptr, c0[0].data()).centroids);
    return out;
  }
  std::vector<kvlab::KMeansProblem> probs;
  for (size_t g = 0; g < xs.size(); ++g) probs.push_back({xs[g].data(), n, d, nullptr, c0[g].data()});
  for (auto& r : kvlab::kmeans_batch(probs, p)) out.push_back(std::move(r.centroids));
  return out;
}

#ifdef KVLAB_HAVE_FAISS
std::vector<std::vector<float>> run_faiss(const std::vector<std::vector<float>>& xs,
                                          const std::vector<std::vector<float>>& c0, int64_t n, int64_t d,
                                          int64_t k, int iters) {
  std::vector<std::vector<float>> out;
  for (size_t g = 0; g < xs.size(); ++g) {
    faiss::ClusteringParameters cp;
    cp.niter = iters;
    cp.max_points_per_centroid = 1 << 30;  // no subsampling: train on every point as kvlab does
    cp.min_points_per_centroid = 1;
    faiss::Clustering clus(d, k, cp);
    clus.centroids = c0[g];  // hot start: faiss updates given centroids unless frozen
    faiss::IndexFlatL2 index(d);
    clus.train(n, xs[g].data(), index);
    out.push_back(clus.centroids);
  }
  return out;
}
#endif

struct BenchArgs {
  int repeats = 3, faiss_repeats = 1, iters = 20;
  bool use_faiss = true;
  std::string only;
};

// Returns false (after printing the usage) on an unknown argument.
bool parse_args(int argc, char** argv, BenchArgs& a) {
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--repeats" && i + 1 < argc)
      a.repeats = std::atoi(argv[++i]);
    else if (arg == "--faiss-repeats" && i + 1 < argc)
      a.faiss_repeats = std::atoi(argv[++i]);
    else if (arg == "--iters" && i + 1 < argc)
      a.iters = std::atoi(argv[++i]);
    else if (arg == "--cases" && i + 1 < argc)
      a.only = argv[++i];
    else if (arg == "--no-faiss")
      a.use_faiss = false;
    else {
      std::fprintf(stderr,
                   "usage: %s [--repeats N] [--faiss-repeats N] [--iters N] [--cases 1Mx4,100Kx8,cq4c8b] "
                   "[--no-faiss]\n",
                   argv[0]);
      return false;
    }
  }
  return true;
}

// One case's data split into its channel groups, and the starting centroids per group (a
// random sample of points, as faiss starts).
struct CaseData {
  std::vector<std::vector<float>> xs, c0;
};

CaseData make_data(const Case& c) {
  const int64_t dg = c.d / c.groups;
  const std::vector<float> full = blobs(c.n, c.d, 4 * c.k, 42);
  CaseData data{std::vector<std::vector<float>>(c.groups, std::vector<float>(c.n * dg)),
                std::vector<std::vector<float>>(c.groups)};
  std::mt19937_64 rng(7);
  for (int64_t g = 0; g < c.groups; ++g) {
    for (int64_t i = 0; i < c.n; ++i)
      std::memcpy(&data.xs[g][i * dg], &full[i * c.d + g * dg], dg * sizeof(float));
    data.c0[g].resize(c.k * dg);
    for (int64_t j = 0; j < c.k; ++j) {
      const int64_t i = rng() % c.n;
      std::memcpy(&data.c0[g][j * dg], &data.xs[g][i * dg], dg * sizeof(float));
    }
  }
  return data;
}

// `repeats` runs of train(): the wall times and the last run's centroids.
template <class Train>
std::pair<std::vector<double>, std::vector<std::vector<float>>> timed(int repeats, Train train) {
  std::vector<double> t;
  std::vector<std::vector<float>> cents;
  for (int r = 0; r < repeats; ++r) {
    auto t0 = Clock::now();
    cents = train();
    t.push_back(since(t0));
  }
  return {t, cents};
}

void run_case(const Case& c, const BenchArgs& a, int max_threads) {
  const int64_t dg = c.d / c.groups;
  const CaseData data = make_data(c);
  const auto& xs = data.xs;
  const auto& c0 = data.c0;
  auto report = [&](const char* impl, int threads, const std::vector<double>& t,
                    const std::vector<std::vector<float>>& cents) {
    double m = 0;
    for (int64_t g = 0; g < c.groups; ++g) m += mse(xs[g].data(), c.n, dg, cents[g], c.k);
    std::printf("%-9s %-8lld %-4lld %-5lld %-6d %-11s %-8d %-10.3f %.9g\n", c.name.c_str(), (long long)c.n,
                (long long)dg, (long long)c.k, a.iters, impl, threads, median(t), m / c.groups);
    std::fflush(stdout);
  };
  std::vector<int> thread_counts = {1};
  if (max_threads > 1) thread_counts.push_back(max_threads);
  for (int th : thread_counts) {
    const auto [t, cents] = timed(a.repeats, [&] { return run_kvlab(xs, c0, c.n, dg, c.k, a.iters, th); });
    report("kvlab", th, t, cents);
  }
  {  // faiss's empty-cluster rule: the same algorithm step for step
    const auto [t, cents] = timed(a.repeats, [&] {
      return run_kvlab(xs, c0, c.n, dg, c.k, a.iters, max_threads, kvlab::KMeansSplit::Faiss);
    });
    report("kvlab-fsplit", max_threads, t, cents);
  }
#ifdef KVLAB_HAVE_FAISS
  if (a.use_faiss) {
    const auto [t, cents] = timed(a.faiss_repeats, [&] { return run_faiss(xs, c0, c.n, dg, c.k, a.iters); });
    report("faiss-1.7.3", max_threads, t, cents);
  }
#endif
}

}  // namespace

int main(int argc, char** argv) {
  BenchArgs a;
  if (!parse_args(argc, argv, a)) return 2;
#ifndef KVLAB_HAVE_FAISS
  a.use_faiss = false;
  std::printf("faiss: not built in (libfaiss-dev absent at configure time); kvlab only\n");
#endif
  const std::vector<Case> cases = {
      {"1Mx4", 1000000, 4, 256, 1}, {"100Kx8", 100000, 8, 4096, 1}, {"cq4c8b", 65536, 128, 256, 32}};
  const int max_threads = kvlab::resolve_threads(0);
  std::printf("case      n        d    k     iters  impl        threads  median_s   mse\n");
  for (const auto& c : cases) {
    if (!a.only.empty() && a.only.find(c.name) == std::string::npos) continue;
    run_case(c, a, max_threads);
  }
  return 0;
}
