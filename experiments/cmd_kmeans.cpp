// kvlab kmeans --input X.npy --k K [--iters 20] [--init random|kmeans++|farthest|C0.npy]
//              [--seed S] [--weights W.npy] [--restarts R] [--threads N] --out C.npz
#include <chrono>
#include <cstdio>
#include <cstring>
#include <stdexcept>

#include "cli_options.h"
#include "common.h"
#include "kvlab/kmeans.h"
#include "kvlab/npy.h"
#include "kvlab/path_checks.h"

namespace kvlab::cli {
namespace {

struct KMeansArgs {
  std::string input, init = "random", weights, out;
  KMeansParams p;
};

// A (rows, cols) float array from a float16/float32 .npy, as fp32.
std::vector<float> read_matrix(const std::string& path, const char* what, int64_t& rows, int64_t& cols) {
  const NpyArray a = read_npy(path);
  const TensorView v = as_tensor(a, path);
  if (v.shape.size() == 1) {
    rows = v.shape[0];
    cols = 1;
  } else if (v.shape.size() == 2) {
    rows = v.shape[0];
    cols = v.shape[1];
  } else
    throw std::invalid_argument(std::string(what) + " '" + path + "': shape " + shape_string(v.shape) +
                                " is not (n, d)");
  std::vector<float> x(v.numel());
  for (int64_t i = 0; i < v.numel(); ++i) x[i] = v.at(i);
  return x;
}

void run(KMeansArgs a) {
  const bool from_file = a.init.size() > 4 && a.init.substr(a.init.size() - 4) == ".npy";
  std::vector<NamedPath> inputs = {{"--input", a.input}};
  if (!a.weights.empty()) inputs.push_back({"--weights", a.weights});
  if (from_file) inputs.push_back({"--init", a.init});
  for (const NamedPath& in : inputs) check_input_file(in);
  check_outputs_not_inputs({{"--out", a.out}}, inputs);
  int64_t n = 0, d = 0;
  const std::vector<float> x = read_matrix(a.input, "--input", n, d);
  std::vector<float> w, c0;
  if (!a.weights.empty()) {
    int64_t wn = 0, wd = 0;
    w = read_matrix(a.weights, "--weights", wn, wd);
    if (wn != n || wd != 1)
      throw std::invalid_argument("--weights '" + a.weights + "': " + std::to_string(wn * wd) +
                                  " values for " + std::to_string(n) + " points");
  }
  if (from_file) {
    int64_t ck = 0, cd = 0;
    c0 = read_matrix(a.init, "--init", ck, cd);
    if (ck != a.p.k || cd != d)
      throw std::invalid_argument("--init '" + a.init + "': shape (" + std::to_string(ck) + ", " +
                                  std::to_string(cd) + ") is not (k, d) = (" + std::to_string(a.p.k) + ", " +
                                  std::to_string(d) + ")");
  } else {
    a.p.init = parse_kmeans_init(a.init);
  }
  const auto t0 = std::chrono::steady_clock::now();
  const KMeansResult r =
      kmeans(x.data(), n, d, a.p, w.empty() ? nullptr : w.data(), c0.empty() ? nullptr : c0.data());
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  std::vector<float> obj, times, imb;
  for (const auto& s : r.iterations) {
    obj.push_back(s.objective);
    times.push_back(s.time_s);
    imb.push_back(s.imbalance);
  }
  std::vector<uint8_t> assign_bytes(r.assign.size() * 4);
  std::memcpy(assign_bytes.data(), r.assign.data(), assign_bytes.size());
  NpyArray assign{"<i4", {n}, std::move(assign_bytes)};
  const int64_t it = r.iterations.size();
  write_npz(a.out, {{"centroids", make_npy(r.centroids, {a.p.k, d})},
                    {"assign", std::move(assign)},
                    {"objective", make_npy(obj, {it})},
                    {"iter_time_s", make_npy(times, {it})},
                    {"imbalance", make_npy(imb, {it})}});
  std::printf(
      "%s: (%lld, %lld) -> %lld centroids, %d iterations, init %s%s: mse per vector %.9g, %.3f s -> %s\n",
      a.input.c_str(), (long long)n, (long long)d, (long long)a.p.k, a.p.iters,
      from_file ? a.init.c_str() : to_string(a.p.init), w.empty() ? "" : ", weighted", r.mse(), secs,
      a.out.c_str());
}

}  // namespace

static void add_kmeans(CLI::App& app) {
  auto args = std::make_shared<KMeansArgs>();
  auto* c = app.add_subcommand(
      "kmeans", "k-means on an (n, d) float .npy; writes centroids, assignments and per-iteration objective");
  c->add_option("--input", args->input, "float16/float32 .npy of shape (n, d)")->required();
  c->add_option("--k", args->p.k, "number of centroids")->check(int_range(1))->required();
  c->add_option("--iters", args->p.iters, "Lloyd iterations")->check(int_range(0))->capture_default_str();
  c->add_option("--init", args->init,
                enum_list<KMeansInit>(" | ", " | ") + " | a (k, d) .npy of starting centroids")
      ->capture_default_str();
  c->add_option("--seed", args->p.seed, "random seed")->capture_default_str();
  c->add_option("--restarts", args->p.restarts, "runs from different seeds; the best is kept")
      ->check(int_range(1))
      ->capture_default_str();
  c->add_option("--max-points-per-centroid", args->p.max_points_per_centroid,
                "train on a sample of k * this many points (0: all)")
      ->check(int_range(0))
      ->capture_default_str();
  c->add_option("--weights", args->weights, "(n,) .npy of non-negative per-point weights");
  add_threads_option(c, args->p.threads, "OpenMP threads (0: default; results do not depend on it)");
  add_out_option(c, args->out,
                 ".npz with centroids (k, d), assign (n,), objective, iter_time_s, imbalance (iters,)")
      ->required();
  c->callback([args] { run(*args); });
}

KVLAB_COMMAND(55, add_kmeans);

}  // namespace kvlab::cli
