// kvlab vq train [DUMP | synthetic:PRESET[:tokens=N]] --spec CQ-4c8b [--role k|v|kv] [--iters 20]
//                [--init kmeans++] [--seed 0] [--layers a-b] [--device cpu|cuda] --out CB.h5
// kvlab vq reorder CB.h5 [--dump DUMP] --reg-bytes N --smem-bytes M [--device cpu|cuda] [--out CB2.h5]
// Under mpirun/srun, train spreads its (role, layer, KV head) units over the ranks (docs/SCALING.md).
// --device cuda: the GPU k-means (gpu/src/kmeans.cu) from the CPU's starts (k-means++ starts drawn
// on the GPU, gpu/src/kmeans_pp.cu, the same picks), and the GPU's codes and counts for reorder;
// all give the CPU's results bit for bit (kvlab-gpu-kmeans --validate).
#include <chrono>
#include <cstdio>
#include <exception>
#include <future>
#include <memory>
#include <stdexcept>

#include "cli_options.h"
#include "common.h"
#include "dist_studies.h"
#include "dump_source.h"
#include "kvlab/codebook_file.h"
#include "kvlab/dist.h"
#include "kvlab/dump.h"
#include "kvlab/path_checks.h"
#include "kvlab/selection.h"
#include "kvlab/threads.h"
#include "kvlab/vq.h"
#include "kvlab/vq_reorder.h"
#include "kvlab/wire.h"
#ifdef KVLAB_HAVE_GPU_KMEANS
#include "kvlab_gpu/kmeans.h"
#endif

namespace kvlab::cli {
namespace {

std::vector<Role> parse_roles(const std::string& r) {
  if (r == "k") return {Role::K};
  if (r == "v") return {Role::V};
  if (r == "kv") return {Role::K, Role::V};
  throw std::invalid_argument("--role '" + r + "': expected k, v or kv");
}

VQCodebooks head_books(const CodebookFile& f, int64_t role, int64_t layer, int64_t head) {
  VQCodebooks cb;
  cb.spec = parse_vq_spec(f.spec);
  cb.head_dim = f.head_dim;
  const int64_t n = f.book_floats(), at = ((layer - f.first_layer) * f.num_kv_heads + head) * n;
  cb.data.assign(f.books[role].begin() + at, f.books[role].begin() + at + n);
  return cb;
}

void check_device(const std::string& device) {
  if (device != "cpu" && device != "cuda")
    throw std::invalid_argument("--device '" + device + "': expected cpu or cuda");
#ifndef KVLAB_HAVE_GPU_KMEANS
  if (device == "cuda")
    throw std::invalid_argument("--device cuda: this kvlab was built without CUDA (no nvcc)");
#endif
}

#ifdef KVLAB_HAVE_GPU_KMEANS
// One stage's problems (all of one shape) on the GPU, from the CPU's starting centroids (k-means++
// starts drawn on the GPU, the same picks); the time of the GPU calls (uploads, starts, k-means,
// downloads) is added to *gpu_s, that of the GPU's k-means++ starts also to *starts_s.
std::vector<KMeansResult> gpu_kmeans_batch(const std::vector<KMeansProblem>& probs, const KMeansParams& p,
                                           double* gpu_s, double* starts_s) {
  const gpu::KMeansShape s{(int64_t)probs.size(), probs[0].n, probs[0].d, p.k};
  bool contiguous = true;  // vq_train_heads's problems lie back to back: uploaded without a copy
  for (int64_t i = 0; i < s.problems; ++i) {
    const auto& q = probs[i];
    if (q.n != s.n || q.d != s.d || q.weights)
      throw std::invalid_argument("--device cuda: problems differ in shape");
    contiguous = contiguous && q.x == probs[0].x + i * s.n * s.d;
  }
  std::vector<float> x(contiguous ? 0 : s.problems * s.n * s.d), c(s.problems * s.k * s.d);
  bool given = false;  // starting centroids from the caller
  for (const auto& q : probs) given = given || q.init;
  const bool gpu_pp = p.init == KMeansInit::KMeansPP && !given;
  // Otherwise the CPU's starts, one problem per thread: a start does not depend on the thread
  // count (kmeans.h), and a layer's hundreds of problems keep every core busy.
  KMeansParams one = p;
  one.threads = 1;
  const int nt = resolve_threads(p.threads);
  std::vector<std::exception_ptr> errors(s.problems);  // thrown out of the parallel loop, not in it
#pragma omp parallel for schedule(dynamic, 1) num_threads(nt)
  for (int64_t i = 0; i < s.problems; ++i) {
    const auto& q = probs[i];
    if (!contiguous) std::copy(q.x, q.x + s.n * s.d, &x[i * s.n * s.d]);
    try {
      if (gpu_pp) {
        kmeans_check(q.x, q.n, q.d, one);  // the CPU path's errors (NaN or Inf, k > n)
        continue;
      }
      const auto c0 =
          q.init ? std::vector<float>(q.init, q.init + p.k * q.d) : kmeans_start(q.x, q.n, q.d, one);
      std::copy(c0.begin(), c0.end(), &c[i * s.k * s.d]);
    } catch (...) {
      errors[i] = std::current_exception();
    }
  }
  for (const auto& e : errors)
    if (e) std::rethrow_exception(e);
  const std::unique_ptr<int32_t[]> a(new int32_t[s.problems * s.n]);  // every entry written
  gpu::KMeansPlusPlus pp;
  pp.seed = p.seed;
  const auto t = std::chrono::steady_clock::now();
  gpu::kmeans_batch(contiguous ? probs[0].x : x.data(), s, p.iters, c.data(), a.get(),
                    gpu_pp ? &pp : nullptr);
  *gpu_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
  *starts_s += pp.seconds;
  std::vector<KMeansResult> out(probs.size());
#pragma omp parallel for schedule(static) num_threads(nt)
  for (int64_t i = 0; i < s.problems; ++i) {
    out[i].k = s.k;
    out[i].d = s.d;
    out[i].n = s.n;
    out[i].centroids.assign(c.begin() + i * s.k * s.d, c.begin() + (i + 1) * s.k * s.d);
    out[i].assign.assign(a.get() + i * s.n, a.get() + (i + 1) * s.n);
  }
  return out;
}

// vq_usage(cb, vq_encode(cb, x, T), T) with the nearest entries and counts from the GPU: every
// group of a stage in one batch, residuals on the host as vq_encode subtracts them.
std::vector<int64_t> gpu_usage(const VQCodebooks& cb, const float* x, int64_t T) {
  const int64_t D = cb.head_dim, G = cb.groups(), v = cb.spec.vec, K = cb.spec.entries();
  std::vector<float> resid(x, x + T * D), sub(G * T * v);
  std::vector<int32_t> a(G * T);
  std::vector<int64_t> usage(cb.spec.stages * G * K);
  for (int st = 0; st < cb.spec.stages; ++st) {
    for (int64_t g = 0; g < G; ++g)
      for (int64_t t = 0; t < T; ++t)
        for (int64_t j = 0; j < v; ++j) sub[(g * T + t) * v + j] = resid[t * D + g * v + j];
    gpu::nearest_batch(sub.data(), {G, T, v, K}, cb.book(st, 0), a.data(), &usage[st * G * K]);
    for (int64_t g = 0; g < G; ++g)
      for (int64_t t = 0; t < T; ++t)
        for (int64_t j = 0; j < v; ++j) resid[t * D + g * v + j] -= cb.book(st, g)[a[g * T + t] * v + j];
  }
  return usage;
}
#endif

// One (role, layer, KV head) trained: its codebooks and the squared error of its reconstruction.
struct HeadBooks {
  std::vector<float> books;
  double sq = 0, ref = 0;
};

struct TrainArgs {
  std::string dump, spec = "CQ-4c8b", role = "kv", init = "kmeans++", layers, out, device = "cpu";
  int iters = 20, threads = 0;
  uint64_t seed = 0;
};

void train(const TrainArgs& a) {
  check_device(a.device);
  const auto t0 = std::chrono::steady_clock::now();
  const std::string path = a.dump.empty() ? default_dump_path() : a.dump;
  check_outputs_not_inputs({{"--out", a.out}}, dump_inputs(path));
  auto reader = open_dump_source(path);  // a file, or synthetic:PRESET (the model-scale benchmark)
  const DumpInfo& info = reader->info();
  const VQSpec spec = parse_vq_spec(a.spec);
  check_vq_fits(spec, info.head_dim);
  const LayerRange lr =
      resolve_layers(a.layers.empty() ? LayerRange{} : parse_layers(a.layers), info.num_layers);
  KMeansParams p;
  p.iters = a.iters;
  p.init = parse_kmeans_init(a.init);
  p.seed = a.seed;
  p.threads = a.threads;

  CodebookFile f;
  f.spec = to_string(spec);
  f.vec = spec.vec;
  f.bits = spec.bits;
  f.stages = spec.stages;
  f.first_layer = lr.first;
  f.num_layers = lr.last - lr.first + 1;
  f.num_kv_heads = info.num_kv_heads;
  f.head_dim = info.head_dim;
  f.tokens = info.tokens;
  f.model = info.model;
  f.source = "kvlab vq train " + path + " --spec " + f.spec + " --role " + a.role + " --iters " +
             std::to_string(a.iters) + " --init " + a.init + " --seed " + std::to_string(a.seed);
  const int64_t T = info.tokens, D = info.head_dim, H = info.num_kv_heads, L = f.num_layers;
  // One unit per (role, layer, KV head), in file order; codebooks per head are independent.
  // Where the time goes (seconds): generating or reading the dump, vq_train_heads (starts,
  // gathers, k-means, codes) and within it the GPU calls, scoring the reconstruction, the file.
  double read_s = 0, train_s = 0, gpu_s = 0, starts_s = 0, score_s = 0;
  KMeansBatchFn trainer = kmeans_batch;
#ifdef KVLAB_HAVE_GPU_KMEANS
  if (a.device == "cuda")
    trainer = [&gpu_s, &starts_s](const std::vector<KMeansProblem>& probs, const KMeansParams& q) {
      return gpu_kmeans_batch(probs, q, &gpu_s, &starts_s);
    };
#endif
  const auto since = [](std::chrono::steady_clock::time_point t) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
  };
  // Codebooks of several heads, every group of a stage in one batch (a whole layer on the GPU),
  // and each head's codes of its tokens (vq_encode's, from the training's final assignments).
  std::vector<std::vector<uint8_t>> codes;
  const auto train_heads = [&](const std::vector<const float*>& xs) {
    const auto t = std::chrono::steady_clock::now();
    auto cbs = vq_train_heads(xs, T, D, spec, p, trainer, &codes);
    train_s += since(t);
    return cbs;
  };
  // vq_decode's x_hat a token at a time (no T x D buffer), sums in element order.
  const auto score_head = [&](const VQCodebooks& cb, const std::vector<uint8_t>& code, const float* xh) {
    HeadBooks hb;
    hb.books = cb.data;
    std::vector<float> row(D);
    for (int64_t t = 0; t < T; ++t) {
      vq_decode_into(cb, &code[t * spec.stages * cb.groups()], 1, row.data());
      for (int64_t j = 0; j < D; ++j) {
        const float x = xh[t * D + j];
        hb.sq += (double)(x - row[j]) * (x - row[j]);
        hb.ref += (double)x * x;
      }
    }
    return hb;
  };
  const std::vector<Role> roles = parse_roles(a.role);
  const int64_t units = (int64_t)roles.size() * L * H;
  std::vector<HeadBooks> done(units);
  const dist::World& w = dist::world();
  if (w.size == 1) {
    // With --device cuda the next layer is read (or generated) on a second thread while the GPU
    // trains this one; reading then counts only the wait for it.
    const auto start_read = [&](int64_t u) {
      return std::async(a.device == "cuda" ? std::launch::async : std::launch::deferred,
                        [&, u] { return reader->read(lr.first + u / H % L, roles[u / (L * H)]); });
    };
    std::future<Tensor> next = start_read(0);
    for (int64_t u = 0; u < units; u += H) {  // a whole layer at a time
      auto t = std::chrono::steady_clock::now();
      const Tensor x = next.get();
      if (u + H < units) next = start_read(u + H);
      read_s += since(t);
      std::vector<const float*> xs(H);
      for (int64_t h = 0; h < H; ++h) xs[h] = &x.data[h * T * D];
      const auto cbs = train_heads(xs);
      t = std::chrono::steady_clock::now();
#pragma omp parallel for schedule(static) num_threads(resolve_threads(a.threads))
      for (int64_t h = 0; h < H; ++h) done[u + h] = score_head(cbs[h], codes[h], xs[h]);
      score_s += since(t);
    }
  } else {
    const auto [first, last] = dist::unit_block(units, w.rank, w.size);
    const EvalShape shape{info.num_layers, info.num_q_heads, H, D, T};
    dist::Writer out;
    put_plan(out, shape, units);
    for (int64_t u = first; u < last; ++u) {
      const Tensor x = reader->read_head(lr.first + u / H % L, roles[u / (L * H)], u % H);
      // Train first: codes[0] exists only after train_heads (argument order is unspecified).
      const auto cbs = train_heads({x.data.data()});
      const HeadBooks hb = score_head(cbs[0], codes[0], x.data.data());
      out.put(u);
      out.put_vector(hb.books);
      out.put(hb.sq);
      out.put(hb.ref);
    }
    const std::vector<std::string> parts = dist::gather_to_root(out.bytes());
    if (!w.root()) return;  // only rank 0 writes
    for (int k = 0; k < w.size; ++k) {
      dist::Reader in(parts[k], "vq train: results of rank " + std::to_string(k));
      check_plan(in, shape, units, k, "vq train");
      const auto [b, e] = dist::unit_block(units, k, w.size);
      for (int64_t u = b; u < e; ++u) {
        if (in.get<int64_t>() != u)
          throw std::runtime_error("vq train: rank " + std::to_string(k) + " sent the wrong unit");
        done[u].books = in.get_vector<float>();
        done[u].sq = in.get<double>();
        done[u].ref = in.get<double>();
      }
    }
  }
  double sq = 0, ref = 0;  // summed in unit order, per unit sums first, for any rank count
  for (size_t ri = 0; ri < roles.size(); ++ri) {
    f.roles.push_back(to_string(roles[ri]));
    std::vector<float> books;
    for (int64_t u = ri * L * H; u < (int64_t)(ri + 1) * L * H; ++u) {
      books.insert(books.end(), done[u].books.begin(), done[u].books.end());
      sq += done[u].sq;
      ref += done[u].ref;
    }
    f.books.push_back(std::move(books));
    f.usage.emplace_back();
  }
  const auto tw = std::chrono::steady_clock::now();
  write_codebook_file(a.out, f);
  const double write_s = since(tw), secs = since(t0);
  std::printf(
      "%s: %s, roles %s, layers %lld-%lld, %lld kv heads, %lld groups x %d stage(s) of %lld entries: "
      "relative squared error %.6g, %.4f code bits/element (%.4f with codebooks), %.2f s (training %.2f s) "
      "-> "
      "%s\n",
      path.c_str(), f.spec.c_str(), a.role.c_str(), (long long)lr.first, (long long)lr.last,
      (long long)f.num_kv_heads, (long long)f.groups(), spec.stages, (long long)spec.entries(),
      ref > 0 ? sq / ref : 0.0, vq_code_bits(spec), vq_bits_per_element(spec, T, D), secs, train_s,
      a.out.c_str());
  if (w.size == 1)
    std::printf(
        "  time: reading %.2f s, training %.2f s (GPU calls %.2f s, of which k-means++ starts %.2f s), "
        "scoring %.2f s, writing %.2f s\n",
        read_s, train_s, gpu_s, starts_s, score_s, write_s);
}

struct ReorderArgs {
  std::string file, dump, out, device = "cpu";
  int64_t reg_bytes = 0, smem_bytes = 0;
};

void reorder(const ReorderArgs& a) {
  check_device(a.device);
  const std::string path = a.dump.empty() ? default_dump_path() : a.dump;
  check_input_file({"codebooks", a.file});
  // Without --out the codebook file is rewritten in place (read whole first, replaced
  // atomically); an explicit --out never names an input.
  std::vector<NamedPath> inputs = {{"--dump", path}};
  if (!a.out.empty()) inputs.push_back({"codebooks", a.file});
  check_outputs_not_inputs({{"--out", a.out.empty() ? a.file : a.out}}, inputs);
  CodebookFile f = read_codebook_file(a.file);
  auto reader = open_dump(path);
  const DumpInfo& info = reader->info();
  check_codebooks_match(f, a.file, info.num_layers, info.num_kv_heads, info.head_dim, path);
  const VQSpec spec = parse_vq_spec(f.spec);
  const int64_t T = info.tokens, D = info.head_dim, K = spec.entries();
  const int64_t entry_bytes = 2 * spec.vec;  // fp16 entries in a kernel's cache
  std::vector<std::vector<std::string>> rows = {{"role", "codebooks", "hot (mean)", "n_reg", "n_shared",
                                                 "reg share", "shared share", "global share", "top-16 cov"}};
  for (size_t ri = 0; ri < f.roles.size(); ++ri) {
    const Role role = parse_role(f.roles[ri]);
    std::vector<int64_t> all_usage;
    double hot = 0, s_reg = 0, s_sh = 0, s_gl = 0, top16 = 0;
    int64_t books = 0, n_reg = 0, n_sh = 0;
    for (int64_t l = f.first_layer; l < f.first_layer + f.num_layers; ++l) {
      const Tensor x = reader->read(l, role);
      for (int64_t h = 0; h < f.num_kv_heads; ++h) {
        VQCodebooks cb = head_books(f, ri, l, h);
        std::vector<int64_t> u;
#ifdef KVLAB_HAVE_GPU_KMEANS
        if (a.device == "cuda") u = gpu_usage(cb, &x.data[h * T * D], T);
#endif
        if (a.device == "cpu") u = vq_usage(cb, vq_encode(cb, &x.data[h * T * D], T).data(), T);
        vq_reorder(cb, u, nullptr, T);
        const int64_t at = ((l - f.first_layer) * f.num_kv_heads + h) * f.book_floats();
        std::copy(cb.data.begin(), cb.data.end(), f.books[ri].begin() + at);
        all_usage.insert(all_usage.end(), u.begin(), u.end());
        for (int64_t b = 0; b < (int64_t)u.size() / K; ++b) {
          const CacheLevels c = cache_levels(&u[b * K], K, entry_bytes, a.reg_bytes, a.smem_bytes);
          hot += c.hot;
          s_reg += c.share_reg;
          s_sh += c.share_shared;
          s_gl += c.share_global;
          top16 += c.coverage[std::min<int64_t>(15, K - 1)];
          n_reg = c.n_reg;
          n_sh = c.n_shared;
          ++books;
        }
      }
    }
    f.usage[ri] = std::move(all_usage);
    rows.push_back({f.roles[ri], std::to_string(books), fixed(hot / books, 2), std::to_string(n_reg),
                    std::to_string(n_sh), fixed(s_reg / books, 4), fixed(s_sh / books, 4),
                    fixed(s_gl / books, 4), fixed(top16 / books, 4)});
  }
  f.reordered = true;
  const std::string out = a.out.empty() ? a.file : a.out;
  write_codebook_file(out, f);
  std::printf(
      "%s on %s: %s, %lld-byte entries (fp16), budgets per codebook: registers %lld B, shared %lld B; "
      "shares are means over codebooks -> %s\n",
      a.file.c_str(), path.c_str(), f.spec.c_str(), (long long)entry_bytes, (long long)a.reg_bytes,
      (long long)a.smem_bytes, out.c_str());
  print_table(rows);
}

}  // namespace

static void add_vq(CLI::App& app) {
  auto* vq = app.add_subcommand("vq", "VQ codebooks for KV caches: train, reorder by frequency");
  vq->require_subcommand(1);
  auto t = std::make_shared<TrainArgs>();
  auto* c =
      vq->add_subcommand("train", "Train one codebook per (layer, KV head, role, channel group, stage)");
  add_dump_arg(c, t->dump,
               "KV dump, or synthetic:PRESET[:tokens=N,layers=N,seed=N] (default: the shipped dump)");
  c->add_option("--spec", t->spec, "CQ-<c>c<b>b or VQ<v,b,r>")->capture_default_str();
  c->add_option("--role", t->role, "k, v or kv")->capture_default_str();
  c->add_option("--iters", t->iters, "k-means iterations")->check(int_range(0))->capture_default_str();
  c->add_option("--init", t->init, enum_list<KMeansInit>(", ", " or "))->capture_default_str();
  c->add_option("--seed", t->seed, "k-means seed")->capture_default_str();
  add_layers_option(c, t->layers);
  add_threads_option(c, t->threads, "OpenMP threads (0: default)");
  c->add_option("--device", t->device, "cpu, or cuda: the GPU k-means, same result")->capture_default_str();
  add_out_option(c, t->out, "codebook file (.h5, docs/FORMATS.md)")->required();
  c->callback([t] { train(*t); });
  auto r = std::make_shared<ReorderArgs>();
  auto* o = vq->add_subcommand("reorder",
                               "Sort codebook entries by use on a dump; report hot entries and cache levels");
  o->add_option("codebooks", r->file, "codebook file from kvlab vq train")->required();
  o->add_option("--dump", r->dump, "dump to count uses on (default: the shipped dump)");
  o->add_option("--reg-bytes", r->reg_bytes, "register budget per codebook, bytes")
      ->check(int_range(0))
      ->required();
  o->add_option("--smem-bytes", r->smem_bytes, "shared-memory budget per codebook, bytes")
      ->check(int_range(0))
      ->required();
  o->add_option("--device", r->device, "cpu, or cuda: entry counts on the GPU, same counts")
      ->capture_default_str();
  add_out_option(o, r->out, "output file (default: rewrite the input)");
  o->callback([r] { reorder(*r); });
}

KVLAB_COMMAND(62, add_vq);

}  // namespace kvlab::cli
