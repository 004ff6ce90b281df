// The evaluation driver: layer by layer, KV head by KV head, every method against the reference.
#include "kvlab/evaluate.h"

#include <omp.h>

#include <chrono>
#include <cstring>
#include <ctime>
#include <exception>
#include <stdexcept>

#include "group.h"
#include "head_cache.h"

namespace kvlab {

namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }
double process_cpu() {
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void check_shape(const EvalShape& s) {
  auto fail = [](const std::string& why) { throw std::invalid_argument("eval: " + why); };
  if (s.num_layers <= 0 || s.num_q_heads <= 0 || s.num_kv_heads <= 0 || s.head_dim <= 0 || s.tokens <= 0)
    fail("the dump is empty (layers " + std::to_string(s.num_layers) + ", q heads " +
         std::to_string(s.num_q_heads) + ", kv heads " + std::to_string(s.num_kv_heads) + ", head_dim " +
         std::to_string(s.head_dim) + ", tokens " + std::to_string(s.tokens) + ")");
  if (s.num_q_heads % s.num_kv_heads != 0)
    fail(std::to_string(s.num_q_heads) + " query heads are not a multiple of " +
         std::to_string(s.num_kv_heads) + " KV heads");
}

void check_tensor(const Tensor& t, const std::vector<int64_t>& want, int64_t layer, const char* role) {
  if (t.shape != want || (int64_t)t.data.size() != numel(want))
    throw std::invalid_argument("eval: layer " + std::to_string(layer) + " role " + role + " has shape " +
                                shape_string(t.shape) + ", expected " + shape_string(want));
}

// Scoped OpenMP thread count.
class Threads {
 public:
  explicit Threads(int n) : saved_(omp_get_max_threads()) {
    if (n > 0) omp_set_num_threads(n);
  }
  ~Threads() { omp_set_num_threads(saved_); }
  int now() const { return omp_get_max_threads(); }

 private:
  int saved_;
};

}  // namespace

ReconStats LayerEval::key_total() const {
  ReconStats s;
  for (const auto& x : key) s.merge(x);
  return s;
}
ReconStats LayerEval::value_total() const {
  ReconStats s;
  for (const auto& x : value) s.merge(x);
  return s;
}
AttnStats LayerEval::attn_total() const {
  AttnStats s;
  for (const auto& x : attn) s.merge(x);
  return s;
}

EvalResult evaluate(const EvalShape& shape, const LayerLoader& load, const EvalOptions& opt) {
  const auto t_start = Clock::now();
  const double cpu_start = process_cpu();
  check_shape(shape);
  EvalResult res;
  res.shape = shape;
  res.queries = opt.queries;
  res.tiles = opt.tiles;
  if (opt.tiles.query_tile < 1 || opt.tiles.key_tile < 1)
    throw std::invalid_argument("eval: tile sizes must be >= 1 (query_tile " +
                                std::to_string(opt.tiles.query_tile) + ", key_tile " +
                                std::to_string(opt.tiles.key_tile) + ")");
  const int64_t T = shape.tokens, D = shape.head_dim, Hq = shape.num_q_heads, Hkv = shape.num_kv_heads;
  const int64_t group = Hq / Hkv, TD = T * D;

  // Everything the user typed is checked before the first layer is read.
  const std::vector<std::string>& names = opt.methods.empty() ? default_eval_methods() : opt.methods;
  for (const auto& name : names) {
    MethodEval m;
    m.name = name;
    std::string args;
    if (const CustomMethodFactory* f = find_method_family(name, &args)) {
      try {
        m.custom = std::make_shared<const CustomMethod>((*f)(args, shape));
      } catch (const std::invalid_argument& e) {
        throw std::invalid_argument("--methods '" + name + "': " + e.what());
      }
      m.spec = m.custom->spec, m.bits = m.custom->bits, m.schedule = m.custom->schedule;
      res.methods.push_back(std::move(m));
      continue;
    }
    try {
      m.method = parse_method(name);
    } catch (const std::invalid_argument& e) {
      std::string families;  // registered outside core (method_registry.h); for unknown names only
      if (std::string(e.what()).rfind("method=", 0) == 0)
        for (const auto& f : custom_method_families())
          families += (families.empty() ? "" : ", ") + f + ":...";
      throw std::invalid_argument("--methods '" + name + "': " + e.what() +
                                  (families.empty() ? "" : "; or a registered family: " + families));
    }
    m.spec = to_string(m.method);
    m.bits = bits_per_element(m.method, T, D);
    m.schedule = schedule(m.method, T);
    res.methods.push_back(std::move(m));
  }
  const std::vector<int64_t> pos = select_queries(opt.queries, T);
  const int64_t N = pos.size();
  res.num_queries = N;
  res.layers = resolve_layers(opt.layers, shape.num_layers);
  const int M = res.methods.size();
  int64_t visible = 0;  // valid causal entries per head
  for (int64_t p : pos) visible += p + 1;

  Threads threads(opt.threads);
  res.threads = threads.now();
  const int64_t total_layers = res.layers.last - res.layers.first + 1;
  for (int64_t layer = res.layers.first; layer <= res.layers.last; ++layer) {
    auto t0 = Clock::now();
    double c0 = process_cpu();
    LayerQKV x = load(layer);
    check_tensor(x.q, {Hq, T, D}, layer, "q");
    check_tensor(x.k, {Hkv, T, D}, layer, "k");
    check_tensor(x.v, {Hkv, T, D}, layer, "v");
    check_finite(x.q.view(), "eval: layer " + std::to_string(layer) + " q");
    // Keep only the selected queries, scaled, in place: (Hq, N, D).
    for (int64_t h = 0; h < Hq; ++h) detail::gather_scaled(&x.q.data[h * TD], pos, D, &x.q.data[h * N * D]);
    x.q.data.resize(Hq * N * D);
    x.q.data.shrink_to_fit();
    res.times.load += since(t0);
    res.times.load_cpu += process_cpu() - c0;

    for (auto& m : res.methods) {
      LayerEval le;
      le.layer = layer;
      le.key.resize(Hkv), le.value.resize(Hkv), le.attn.resize(Hq);
      m.layers.push_back(std::move(le));
    }
    for (int64_t g = 0; g < Hkv; ++g) {
      t0 = Clock::now();
      c0 = process_cpu();
      const float* k = &x.k.data[g * TD];
      const float* v = &x.v.data[g * TD];
      const TensorView kview{k, DType::F32, {1, T, D}}, vview{v, DType::F32, {1, T, D}};
      // Dumps captured in fp16 hold fp16 values: core's methods then read fp16 views (the same
      // values, minus a per-element rounding to fp16 in every call).
      const detail::HalfCopies half = detail::half_copies(k, v, TD);
      const TensorView k_in = half.exact ? TensorView{half.k.data(), DType::F16, {1, T, D}} : kview;
      const TensorView v_in = half.exact ? TensorView{half.v.data(), DType::F16, {1, T, D}} : vview;
      // Methods in parallel (core's loops inside run single-threaded then); an exception is
      // rethrown after the loop, the first method's first.
      std::vector<detail::HeadCache> caches(M);
      std::vector<std::exception_ptr> errors(M);
#pragma omp parallel for schedule(dynamic, 1)
      for (int mi = 0; mi < M; ++mi) {
        try {
          MethodEval& m = res.methods[mi];
          detail::HeadCache& c = caches[mi];
          c.r = m.custom ? m.custom->apply(layer, g, kview, vview) : apply_method(m.method, k_in, v_in);
          detail::finish_head_cache(k, v, T, D, m.schedule, c);
          LayerEval& le = m.layers.back();
          le.key[g] = c.key, le.value[g] = c.value;
        } catch (...) {
          errors[mi] = std::current_exception();
        }
      }
      for (const auto& e : errors)
        if (e) std::rethrow_exception(e);
      detail::GroupJob job;
      for (int mi = 0; mi < M; ++mi)
        if (!caches[mi].identical)
          job.methods.push_back({caches[mi].r.k.data.data(), caches[mi].r.v.data.data()});
      res.times.quantize += since(t0);
      res.times.quantize_cpu += process_cpu() - c0;

      t0 = Clock::now();
      c0 = process_cpu();
      // The reference runs even when no method needs computing: its ||O|| enters the
      // identical methods' relative error (0 / ||O||).
      detail::GroupResult gr;
      job.q = &x.q.data[g * group * N * D];
      job.heads = group, job.N = N, job.D = D;
      job.pos = pos.data();
      job.k = k, job.v = v;
      job.tiles = opt.tiles;
      detail::run_group(job, gr, nullptr, &res.times.cpu);
      for (int64_t h = 0; h < group; ++h) {
        int slot = 0;  // index among the computed methods
        for (int mi = 0; mi < M; ++mi) {
          AttnStats& a = res.methods[mi].layers.back().attn[g * group + h];
          if (!caches[mi].identical) {
            a = gr.stats[slot++][h];
            continue;
          }
          a.score_count = visible, a.queries = N, a.topk_sum = (double)N, a.out_sq_ref = gr.ref_sq[h];
        }
      }
      res.times.attention += since(t0);
      res.times.attention_cpu += process_cpu() - c0;
    }
    if (opt.progress) opt.progress({layer - res.layers.first + 1, total_layers, since(t_start)});
  }

  for (auto& m : res.methods)
    for (const auto& le : m.layers) {
      m.key.merge(le.key_total());
      m.value.merge(le.value_total());
      m.attn.merge(le.attn_total());
    }
  res.times.total = since(t_start);
  res.times.total_cpu = process_cpu() - cpu_start;
  return res;
}

}  // namespace kvlab
