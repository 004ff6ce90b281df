// kvlab's k-means against faiss's Clustering on the same data, the same starting centroids and
// the same number of iterations: wall time (median of --repeats runs) and final MSE per vector,
// both measured with the same evaluator (nearest final centroid, exact squared distance in
// double). Two faiss sources: Debian's libfaiss-dev linked in (KVLAB_HAVE_FAISS), or any other
// build (PyPI's faiss-cpu) run by benchmarks/kmeans_faiss_pypi.sh: --write DIR writes every
// case's data and starts, the script trains faiss on them, --faiss-dir DIR reads its centroids
// and times back and scores them here. Each row also gives the brute-force work (n k d iters
// FMAs) per second as a share of the FMA peak measured at start (fma_peak.h).
//   kvlab_bench_kmeans_faiss [--repeats N] [--faiss-repeats N] [--cases a,b,c] [--no-faiss]
//                            [--write DIR | --faiss-dir DIR] [--scaling]
#include <omp.h>
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <random>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "fma_peak.h"
#include "kvlab/kmeans.h"
#include "kvlab/threads.h"
#ifdef KVLAB_HAVE_FAISS
#include <faiss/Clustering.h>
#include <faiss/IndexFlat.h>
#endif

namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }
// User + system seconds of the whole process (all threads): steadier than wall time on a
// machine shared with other jobs.
double cpu_seconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_utime.tv_sec + u.ru_stime.tv_sec + 1e-6 * (u.ru_utime.tv_usec + u.ru_stime.tv_usec);
}

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
  bool use_faiss = true, scaling = false;
  std::string only, write_dir, faiss_dir;
  double peak = 0;  // GFLOP/s of the FMA micro-benchmark at the thread count used
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
    else if (arg == "--scaling")
      a.scaling = true;
    else if (arg == "--write" && i + 1 < argc)
      a.write_dir = argv[++i];
    else if (arg == "--faiss-dir" && i + 1 < argc)
      a.faiss_dir = argv[++i];
    else {
      std::fprintf(
          stderr,
          "usage: %s [--repeats N] [--faiss-repeats N] [--iters N] [--cases 1Mx4,100Kx8,cq4c8b,d2k16,...] "
          "[--no-faiss] [--scaling] [--write DIR | --faiss-dir DIR]\n",
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

struct Timed {
  std::vector<double> wall, cpu;
  std::vector<std::vector<float>> cents;  // of the last run
};
// DIR/NAME.x.f32 (groups x n x dg), DIR/NAME.c0.f32 (groups x k x dg) and a line of
// DIR/cases.txt: "NAME n dg k groups iters".
void write_case(const Case& c, const CaseData& data, const std::string& dir, int iters) {
  auto put = [&](const std::string& path, const std::vector<std::vector<float>>& v) {
    std::ofstream f(path, std::ios::binary);
    for (const auto& g : v) f.write((const char*)g.data(), g.size() * sizeof(float));
    if (!f) throw std::runtime_error("cannot write " + path);
  };
  put(dir + "/" + c.name + ".x.f32", data.xs);
  put(dir + "/" + c.name + ".c0.f32", data.c0);
  std::ofstream m(dir + "/cases.txt", std::ios::app);
  m << c.name << " " << c.n << " " << c.d / c.groups << " " << c.k << " " << c.groups << " " << iters << "\n";
  if (!m) throw std::runtime_error("cannot write " + dir + "/cases.txt");
}

// What benchmarks/kmeans_faiss_pypi.py left for a case: DIR/NAME.faiss.f32 (groups x k x dg
// centroids of its last run) and DIR/NAME.faiss.txt ("version threads" then one time per line).
struct FaissRun {
  std::string label;
  int threads = 0;
  Timed t;
};
bool read_faiss(const Case& c, const std::string& dir, FaissRun& r) {
  std::ifstream t(dir + "/" + c.name + ".faiss.txt");
  std::string version;
  if (!(t >> version >> r.threads)) return false;
  r.label = "faiss-";
  r.label += version;
  for (double w, c; t >> w >> c;) {
    r.t.wall.push_back(w);
    r.t.cpu.push_back(c);
  }
  const int64_t dg = c.d / c.groups;
  std::ifstream f(dir + "/" + c.name + ".faiss.f32", std::ios::binary);
  r.t.cents.assign(c.groups, std::vector<float>(c.k * dg));
  for (auto& g : r.t.cents) f.read((char*)g.data(), g.size() * sizeof(float));
  if (!f || r.t.wall.empty())
    throw std::runtime_error(dir + "/" + c.name + ".faiss.*: truncated (expected " +
                             std::to_string(c.groups) + " x " + std::to_string(c.k) + " x " +
                             std::to_string(dg) + " floats and times)");
  return true;
}

// `repeats` runs of train().
template <class Train>
Timed timed(int repeats, Train train) {
  Timed r;
  for (int i = 0; i < repeats; ++i) {
    const auto t0 = Clock::now();
    const double c0 = cpu_seconds();
    r.cents = train();
    r.wall.push_back(since(t0));
    r.cpu.push_back(cpu_seconds() - c0);
  }
  return r;
}

void run_case(const Case& c, const BenchArgs& a, int max_threads) {
  const int64_t dg = c.d / c.groups;
  const CaseData data = make_data(c);
  if (!a.write_dir.empty()) {
    write_case(c, data, a.write_dir, a.iters);
    std::printf("wrote %s\n", c.name.c_str());
    return;
  }
  const auto& xs = data.xs;
  const auto& c0 = data.c0;
  double ref_t = 0, ref_mse = 0;  // the faiss row's, when there is one
  auto report = [&](const std::string& impl, int threads, const Timed& t) {
    double m = 0;
    for (int64_t g = 0; g < c.groups; ++g) m += mse(xs[g].data(), c.n, dg, t.cents[g], c.k);
    m /= c.groups;
    const double med = median(t.wall), cpu = median(t.cpu),
                 flops = 2.0 * c.n * c.k * c.d * a.iters;  // brute-force FMAs x 2
    char vs[64] = "";
    if (ref_t > 0) std::snprintf(vs, sizeof vs, "%6.2fx %+.4f%%", ref_t / med, 100 * (m / ref_mse - 1));
    std::printf("%-10s %-8lld %-4lld %-5lld %-6d %-13s %-8d %-10.3f %-9.3f %-13.9g %-6.1f %s\n",
                c.name.c_str(), (long long)c.n, (long long)dg, (long long)c.k, a.iters, impl.c_str(), threads,
                med, cpu, m, a.peak > 0 ? 100 * flops / med / 1e9 / a.peak : 0.0, vs);
    std::fflush(stdout);
  };
  FaissRun fr;
  if (!a.faiss_dir.empty() && read_faiss(c, a.faiss_dir, fr)) {
    report(fr.label, fr.threads, fr.t);
    double m = 0;
    for (int64_t g = 0; g < c.groups; ++g) m += mse(xs[g].data(), c.n, dg, fr.t.cents[g], c.k);
    ref_t = median(fr.t.wall);
    ref_mse = m / c.groups;
  }
#ifdef KVLAB_HAVE_FAISS
  if (a.use_faiss && a.faiss_dir.empty()) {
    report("faiss-1.7.3", max_threads,
           timed(a.faiss_repeats, [&] { return run_faiss(xs, c0, c.n, dg, c.k, a.iters); }));
  }
#endif
  std::vector<int> thread_counts = {max_threads};
  if (a.scaling && max_threads > 1) thread_counts.insert(thread_counts.begin(), 1);
  for (int th : thread_counts) {
    report("kvlab", th, timed(a.repeats, [&] { return run_kvlab(xs, c0, c.n, dg, c.k, a.iters, th); }));
  }
  {  // faiss's empty-cluster rule: the same algorithm step for step
    report("kvlab-fsplit", max_threads, timed(a.repeats, [&] {
             return run_kvlab(xs, c0, c.n, dg, c.k, a.iters, max_threads, kvlab::KMeansSplit::Faiss);
           }));
  }
}

}  // namespace

int main(int argc, char** argv) {
  BenchArgs a;
  if (!parse_args(argc, argv, a)) return 2;
#ifndef KVLAB_HAVE_FAISS
  a.use_faiss = false;
  if (a.faiss_dir.empty() && a.write_dir.empty())
    std::printf(
        "faiss: not linked (libfaiss-dev absent at configure time; benchmarks/kmeans_faiss_pypi.sh "
        "runs PyPI's faiss-cpu); kvlab only\n");
#endif
  // The three shapes, then d in {2, 16, 32} x k in {16, 256, 4096} on 100,000 points.
  std::vector<Case> cases = {
      {"1Mx4", 1000000, 4, 256, 1}, {"100Kx8", 100000, 8, 4096, 1}, {"cq4c8b", 65536, 128, 256, 32}};
  for (int64_t d : {2, 16, 32})
    for (int64_t k : {16, 256, 4096})
      cases.push_back({std::string("d").append(std::to_string(d)).append("k").append(std::to_string(k)),
                       100000, d, k, 1});  // (append: GCC 12 warns falsely on "d" + string)
  const int max_threads = kvlab::resolve_threads(0);
  try {
    if (a.write_dir.empty()) {
      a.peak = kvlab::bench::fma_peak_gflops(max_threads);
      std::printf(
          "fp32 FMA peak (micro-benchmark, %d threads): %.1f GFLOP/s; %%peak = 2 n k d iters / time / peak\n",
          max_threads, a.peak);
      std::printf(
          "case       n        d    k     iters  impl          threads  wall_s     cpu_s     mse           "
          "%%peak  speedup(wall) mse-vs-faiss\n");
    } else {
      std::remove((a.write_dir + "/cases.txt").c_str());
    }
    std::string only(",");  // (built with +=: GCC 12 warns falsely on "," + string)
    only += a.only;
    only += ",";
    for (const auto& c : cases) {
      if (!a.only.empty() && only.find("," + c.name + ",") == std::string::npos) continue;
      run_case(c, a, max_threads);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kvlab_bench_kmeans_faiss: %s\n", e.what());
    return 1;
  }
  return 0;
}
