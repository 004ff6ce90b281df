#include "kvlab/kmeans.h"

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <exception>
#include <optional>
#include <random>
#include <stdexcept>

#include "kmeans_assign.h"
#include "kmeans_init.h"
#include "kmeans_prune.h"
#include "kvlab/sizes.h"
#include "kvlab/threads.h"

namespace kvlab {

KMeansInit parse_kmeans_init(const std::string& s) {
  if (const auto i = find_enum<KMeansInit>(s)) return *i;
  throw std::invalid_argument("kmeans: unknown init '" + s + "' (valid: " + enum_choices<KMeansInit>() + ")");
}

namespace {

using Clock = std::chrono::steady_clock;

void check_finite(const float* p, int64_t count, const char* what) {
  for (int64_t i = 0; i < count; ++i)
    if (!std::isfinite(p[i]))
      throw std::invalid_argument(std::string("kmeans: ") + what + " has a NaN or Inf at flat index " +
                                  std::to_string(i));
}

void validate(const float* x, int64_t n, int64_t d, const KMeansParams& p, const float* w,
              const float* init) {
  auto bad = [](const std::string& m) { throw std::invalid_argument("kmeans: " + m); };
  if (d < 1) bad("d (dimension) must be >= 1, got " + std::to_string(d));
  if (n < 1) bad("n (number of points) must be >= 1, got " + std::to_string(n));
  if (p.k < 1) bad("k must be >= 1, got " + std::to_string(p.k));
  if (p.k > n)
    bad("k (" + std::to_string(p.k) + ") is larger than the number of points n (" + std::to_string(n) + ")");
  if (p.k > (int64_t)1 << 31) bad("k must fit in int32, got " + std::to_string(p.k));
  if (p.iters < 0) bad("iters must be >= 0, got " + std::to_string(p.iters));
  if (p.restarts < 1) bad("restarts must be >= 1, got " + std::to_string(p.restarts));
  if (p.max_points_per_centroid < 0) bad("max_points_per_centroid must be >= 0");
  // Sizes the run allocates from (n, d, k): none may wrap around.
  checked_product({n, d}, "kmeans: points x dimension (n x d)");
  checked_product({p.k, d + 2, 8}, "kmeans: centroid sums (k x (d + 2) doubles)");
  if (!x) bad("no data (x is a null pointer)");
  check_finite(x, n * d, "x (data)");
  if (init) check_finite(init, p.k * d, "init (starting centroids)");
  if (w) {
    double s = 0;
    for (int64_t i = 0; i < n; ++i) {
      if (!std::isfinite(w[i])) bad("weights has a NaN or Inf at index " + std::to_string(i));
      if (w[i] < 0) bad("weights must be >= 0; weight " + std::to_string(i) + " is " + std::to_string(w[i]));
      s += w[i];
    }
    if (!(s > 0)) bad("weights sum to zero");
  }
}

// Per-point sums combine over chunks of a size fixed by (n, k, d) alone, in chunk order: small
// enough that two threads share the work evenly, large enough that the k x (d + 2) partial
// sums per chunk stay cheap to combine.
int64_t chunk_points(int64_t n, int64_t k, int64_t d) {
  int64_t chunk = std::max<int64_t>({8192, (n + 255) / 256, 4 * k});
  const int64_t budget = (int64_t)32 << 20;  // doubles of partial sums (256 MiB)
  while ((n + chunk - 1) / chunk * (k * (d + 2)) > budget && chunk < n) chunk *= 2;
  return chunk;
}

struct Stepper {
  const float* x;
  int64_t n, d, k;
  const float* w;
  int nt;
  KMeansSplit split_rule;
  int64_t chunk, nchunks;
  std::vector<double> sums, obj_c;  // [k][d + 2] sums, weight, count; [k] objective
  std::vector<int32_t> assign;
  std::vector<int64_t> count;
  detail::CentroidPack pack;
  detail::PrunedAssign pruned;  // k > 16, d > 8: exact bound-based skipping (kmeans_prune.h); for
                                // d <= 8 the per-point bound check costs about what a scan saves

  Stepper(const float* x_, int64_t n_, int64_t d_, int64_t k_, const float* w_, int nt_, KMeansSplit rule)
      : x(x_),
        n(n_),
        d(d_),
        k(k_),
        w(w_),
        nt(nt_),
        split_rule(rule),
        chunk(chunk_points(n_, k_, d_)),
        nchunks((n_ + chunk - 1) / chunk),
        assign(n_),
        count(k_),
        pruned(x_, (k_ > detail::kLanes && d_ > 8) ? n_ : 0, d_, nt_) {}

  void assign_all(const std::vector<float>& c) {
    pack.build(c.data(), k, d);
    if (k > detail::kLanes && d > 8)
      pruned.assign(c.data(), pack, assign.data());
    else
      detail::assign_nearest(x, n, pack, assign.data(), nt);
  }

  // sum of w * ||x - c||^2 under the current assignment (exact, double, fixed order).
  double objective(const std::vector<float>& c) const {
    std::vector<double> per(nchunks, 0.0);
#pragma omp parallel for schedule(static) num_threads(nt) if (nt > 1 && nchunks > 1)
    for (int64_t ch = 0; ch < nchunks; ++ch) {
      double s = 0;
      for (int64_t i = ch * chunk; i < std::min(n, (ch + 1) * chunk); ++i) {
        const float* xi = x + i * d;
        const float* ci = &c[(int64_t)assign[i] * d];
        double e = 0;
        for (int64_t j = 0; j < d; ++j) {
          const double t = (double)xi[j] - ci[j];
          e += t * t;
        }
        s += w ? w[i] * e : e;
      }
      per[ch] = s;
    }
    double s = 0;
    for (double v : per) s += v;
    return s;
  }

  // update()'s sums for d = 1 (kvquant's per-channel levels, whose points come sorted, so
  // neighbours share a centroid): a run of points with the same centroid adds into registers
  // and stores once at its end. Each centroid's sums take the same additions in the same
  // (point) order as the general loop, so the same bits; there every addition waited on the
  // store of the one before.
  void sum_runs_d1(const std::vector<float>& c, int64_t c0, int64_t c1) {
    int64_t i = 0;
    while (i < n) {
      const int64_t a = assign[i];
      if (a < c0 || a >= c1) {
        ++i;
        continue;
      }
      double* s = &sums[a * 3];
      double sx = s[0], sw = s[1], sn = s[2], obj = obj_c[a];
      const double ca = c[a];
      for (; i < n && assign[i] == a; ++i) {
        const double wi = w ? w[i] : 1.0;
        const double u = (double)x[i] - ca;
        obj += wi * (u * u);
        sx += wi * x[i];
        sw += wi;
        sn += 1;
      }
      s[0] = sx, s[1] = sw, s[2] = sn, obj_c[a] = obj;
    }
  }

  // One pass over the points: the objective under the current assignment and centroids, then
  // new centroids (weighted means of their points). Each thread owns a range of centroids and
  // scans every point's assignment, summing its own points in point order: every sum is the
  // serial one, whatever the thread count, and no partial sums need combining.
  int64_t update(std::vector<float>& c, double* objective_out) {
    const int64_t row = d + 2;  // weighted sums, weight sum, point count
    sums.assign(k * row, 0.0);
    obj_c.assign(k, 0.0);
    const bool par = nt > 1 && (double)n * d >= (1 << 16);
#pragma omp parallel num_threads(nt) if (par)
    {
      const int64_t nth = omp_get_num_threads(), t = omp_get_thread_num();
      const int64_t c0 = k * t / nth, c1 = k * (t + 1) / nth;
      // Points go in batches of kBatch: the squared differences and the sums vectorize along the
      // coordinates, and each point's objective (a sequential sum over j, as before) runs as
      // kBatch independent chains: 8, since a chain waits ~4 cycles per addition and the core
      // retires two. Every accumulator still adds its points in point order.
      constexpr int kBatch = 8;  // (the chains below are written out for 8)
      std::vector<double> sq(kBatch * d);
      int64_t batch[kBatch];
      int m = 0;
      if (d == 1) sum_runs_d1(c, c0, c1);
      for (int64_t i = 0; i < n && d > 1; ++i) {
        const int64_t a = assign[i];
        if (a >= c0 && a < c1) batch[m++] = i;
        if (m < kBatch && i + 1 < n) continue;
        double e[kBatch];
        for (int p = 0; p < m; ++p) {
          const int64_t ip = batch[p], ap = assign[ip];
          const float* xi = x + ip * d;
          const float* ci = &c[ap * d];
          double* s = &sums[ap * row];
          double* q = &sq[p * d];
          for (int64_t j = 0; j < d; ++j) {
            const double u = (double)xi[j] - ci[j];
            q[j] = u * u;
          }
          if (w) {
            const double wi = w[ip];
            for (int64_t j = 0; j < d; ++j) s[j] += wi * xi[j];
          } else {  // 1 * x is x: the same sums without the multiply
            for (int64_t j = 0; j < d; ++j) s[j] += xi[j];
          }
          e[p] = 0;
        }
        if (m == kBatch) {  // eight chains in registers (an array would go through the stack)
          double e0 = 0, e1 = 0, e2 = 0, e3 = 0, e4 = 0, e5 = 0, e6 = 0, e7 = 0;
          for (int64_t j = 0; j < d; ++j) {
            e0 += sq[j];
            e1 += sq[d + j];
            e2 += sq[2 * d + j];
            e3 += sq[3 * d + j];
            e4 += sq[4 * d + j];
            e5 += sq[5 * d + j];
            e6 += sq[6 * d + j];
            e7 += sq[7 * d + j];
          }
          e[0] = e0, e[1] = e1, e[2] = e2, e[3] = e3, e[4] = e4, e[5] = e5, e[6] = e6, e[7] = e7;
        } else {
          for (int p = 0; p < m; ++p)
            for (int64_t j = 0; j < d; ++j) e[p] += sq[p * d + j];
        }
        for (int p = 0; p < m; ++p) {
          const int64_t ap = assign[batch[p]];
          const double wi = w ? w[batch[p]] : 1.0;
          obj_c[ap] += wi * e[p];
          sums[ap * row + d] += wi;
          sums[ap * row + d + 1] += 1;
        }
        m = 0;
      }
    }
    double total = 0;
    std::vector<double> mass(k);
    for (int64_t ci = 0; ci < k; ++ci) {
      const double* s = &sums[ci * row];
      total += obj_c[ci];
      mass[ci] = s[d];
      count[ci] = (int64_t)s[d + 1];
      if (s[d] > 0)
        for (int64_t j = 0; j < d; ++j) c[ci * d + j] = (float)(s[j] / s[d]);
    }
    *objective_out = total;
    return split_empty(c, mass);
  }

  // An empty (or zero-weight) cluster takes a copy of the heaviest one, both nudged apart by
  // a relative 1/1024 in alternating directions, and half its weight (faiss's split, with the
  // largest cluster instead of one drawn in proportion to size: no random numbers needed).
  int64_t split_empty(std::vector<float>& c, std::vector<double>& mass) {
    constexpr float kEps = 1.0f / 1024.0f;
    int64_t splits = 0;
    std::mt19937 rng(1234);  // faiss's RandomGenerator(1234), fresh for every update
    for (int64_t ci = 0; ci < k; ++ci) {
      if (mass[ci] > 0) continue;
      int64_t cj = std::max_element(mass.begin(), mass.end()) - mass.begin();
      if (split_rule == KMeansSplit::Faiss && n > k)
        for (cj = 0;; cj = (cj + 1) % k) {
          const float p = (mass[cj] - 1.0) / (float)(n - k);
          if ((float)rng() / (float)std::mt19937::max() < p) break;
        }
      float* a = &c[ci * d];
      float* b = &c[cj * d];
      for (int64_t j = 0; j < d; ++j) {
        const float s = (j % 2 == 0) ? kEps : -kEps;
        a[j] = b[j] * (1 + s);
        b[j] = b[j] * (1 - s);
      }
      mass[ci] = mass[cj] / 2;
      mass[cj] -= mass[ci];
      ++splits;
    }
    return splits;
  }

  double imbalance() const {
    double s = 0;
    for (int64_t v : count) s += (double)v * v;
    return s * k / ((double)n * n);
  }
};

struct Run {
  std::vector<float> centroids;
  std::vector<KMeansIterStats> iterations;
};

// `st` steps over the training points (x, n); it keeps the pruning bounds for the caller.
Run run_once(Stepper& st, const float* x, int64_t n, int64_t d, const KMeansParams& p, const float* w,
             const float* init, uint64_t seed, int nt) {
  const auto t0 = Clock::now();
  std::mt19937_64 rng(seed);
  Run r;
  r.centroids = init ? std::vector<float>(init, init + p.k * d)
                     : detail::init_centroids(x, n, d, p.k, p.init, w, rng, nt);
  for (int it = 0; it < p.iters; ++it) {
    KMeansIterStats s;
    st.assign_all(r.centroids);
    s.scanned = (st.k > detail::kLanes && st.d > 8) ? st.pruned.scanned() : st.n;
    s.splits = st.update(r.centroids, &s.objective);
    s.imbalance = st.imbalance();
    s.time_s = std::chrono::duration<double>(Clock::now() - t0).count();
    r.iterations.push_back(s);
  }
  return r;
}

}  // namespace

KMeansResult kmeans(const float* x, int64_t n, int64_t d, const KMeansParams& p, const float* w,
                    const float* init) {
  validate(x, n, d, p, w, init);
  const int nt = resolve_threads(p.threads);
  KMeansResult res;
  res.k = p.k;
  res.d = d;
  res.n = n;

  // Opt-in subsample (a copy of the chosen points and their weights).
  std::vector<float> sx, sw;
  const float* tx = x;
  const float* tw = w;
  int64_t tn = n;
  // k x max_points_per_centroid may exceed int64 (--max-points-per-centroid 2^62): no sample then.
  int64_t sample = 0;
  if (p.max_points_per_centroid > 0 && !__builtin_mul_overflow(p.k, p.max_points_per_centroid, &sample) &&
      n > sample) {
    std::mt19937_64 rng(p.seed ^ 0x5bd1e995u);
    auto idx = detail::sample_indices(n, sample, rng);
    std::sort(idx.begin(), idx.end());
    tn = idx.size();
    sx.resize(tn * d);
    if (w) sw.resize(tn);
    for (int64_t i = 0; i < tn; ++i) {
      std::copy(x + idx[i] * d, x + (idx[i] + 1) * d, &sx[i * d]);
      if (w) sw[i] = w[idx[i]];
    }
    tx = sx.data();
    tw = w ? sw.data() : nullptr;
  }
  res.trained_points = tn;

  const int runs = init ? 1 : p.restarts;
  for (int r = 0; r < runs; ++r) {
    // Without a subsample the final assignment reuses the run's stepper (and its bounds).
    Stepper st(tx, tn, d, p.k, tw, nt, p.split);
    Run run = run_once(st, tx, tn, d, p, tw, init, p.seed + (uint64_t)r * 15486557ull, nt);
    std::optional<Stepper> full;
    if (tn != n) full.emplace(x, n, d, p.k, w, nt, p.split);
    Stepper& final_step = tn != n ? *full : st;
    final_step.assign_all(run.centroids);
    const double obj = final_step.objective(run.centroids);
    res.restart_objectives.push_back(obj);
    if (r == 0 || obj < res.objective) {
      res.objective = obj;
      res.best_restart = r;
      res.centroids = std::move(run.centroids);
      res.iterations = std::move(run.iterations);
      res.assign = final_step.assign;
    }
  }
  double ws = 0;
  if (w)
    for (int64_t i = 0; i < n; ++i) ws += w[i];
  res.weight_sum = w ? ws : (double)n;
  return res;
}

std::vector<float> kmeans_start(const float* x, int64_t n, int64_t d, const KMeansParams& p, const float* w) {
  validate(x, n, d, p, w, nullptr);
  std::mt19937_64 rng(p.seed);  // run_once's generator for restart 0
  return detail::init_centroids(x, n, d, p.k, p.init, w, rng, resolve_threads(p.threads));
}

void kmeans_check(const float* x, int64_t n, int64_t d, const KMeansParams& p, const float* w) {
  validate(x, n, d, p, w, nullptr);
}

std::vector<KMeansResult> kmeans_batch(const std::vector<KMeansProblem>& problems,
                                       const KMeansParams& params) {
  const int64_t np = problems.size();
  std::vector<KMeansResult> out(np);
  std::vector<std::exception_ptr> errors(np);
  const int nt = resolve_threads(params.threads);
  KMeansParams one = params;
  one.threads = 1;  // parallel across problems; each alone gives the same answer anyway
#pragma omp parallel for schedule(dynamic, 1) num_threads(nt)
  for (int64_t i = 0; i < np; ++i) {
    try {
      const auto& q = problems[i];
      out[i] = kmeans(q.x, q.n, q.d, one, q.weights, q.init);
    } catch (...) {
      errors[i] = std::current_exception();
    }
  }
  for (int64_t i = 0; i < np; ++i)
    if (errors[i]) {
      try {
        std::rethrow_exception(errors[i]);
      } catch (const std::invalid_argument& e) {
        throw std::invalid_argument("kmeans_batch: problem " + std::to_string(i) + ": " + e.what());
      }
    }
  return out;
}

void kmeans_assign(const float* x, int64_t n, int64_t d, const float* centroids, int64_t k, int32_t* assign,
                   float* dist2, int threads) {
  if (d < 1 || k < 1 || n < 0) throw std::invalid_argument("kmeans_assign: need d >= 1, k >= 1, n >= 0");
  detail::CentroidPack pack;
  pack.build(centroids, k, d);
  detail::assign_nearest(x, n, pack, assign, threads);
  if (dist2)
    for (int64_t i = 0; i < n; ++i) {
      float e = 0;
      for (int64_t j = 0; j < d; ++j) {
        const float t = x[i * d + j] - centroids[(int64_t)assign[i] * d + j];
        e += t * t;
      }
      dist2[i] = e;
    }
}

}  // namespace kvlab
