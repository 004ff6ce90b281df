// The evaluation driver: layer by layer, KV head by KV head, every method against the reference.
#include "kvlab/evaluate.h"

#include <chrono>
#include <cstring>
#include <ctime>
#include <exception>
#include <future>
#include <stdexcept>

#include "group.h"
#include "head_cache.h"
#include "kvlab/threads.h"

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

namespace {

// Wall and CPU seconds of one phase, added to its counters when the scope ends.
class PhaseTimer {
 public:
  PhaseTimer(double& wall, double& cpu) : wall_(wall), cpu_(cpu), t0_(Clock::now()), c0_(process_cpu()) {}
  ~PhaseTimer() {
    wall_ += since(t0_);
    cpu_ += process_cpu() - c0_;
  }

 private:
  double &wall_, &cpu_;
  Clock::time_point t0_;
  double c0_;
};

// Phase 1: every name the user typed, parsed and checked against the dump's shape before the
// first layer is read.
std::vector<MethodEval> resolve_methods(const std::vector<std::string>& names, const EvalShape& shape) {
  std::vector<MethodEval> out;
  for (const auto& name : names) {
    MethodEval m;
    m.name = name;
    try {
      m.method = parse_method(name);
      m.method->check_model({shape.num_layers, shape.num_kv_heads, shape.head_dim});
    } catch (const std::invalid_argument& e) {
      throw std::invalid_argument("--methods '" + name + "': " + e.what());
    }
    if (m.method->needs_k_pre_rope() && !shape.has_k_pre_rope)
      throw std::invalid_argument("--methods '" + name +
                                  "' quantizes keys before RoPE, and the dump has no k_pre_rope: capture it "
                                  "with `kvlab dump` (the C++ runner always writes it), `kvlab synth "
                                  "--k-pre-rope`, or kvlab.capture(..., store_pre_rope=True)");
    if (m.method->needs_k_pre_rope() && shape.rope_style == RopeStyle::None)
      throw std::invalid_argument("--methods '" + name +
                                  "' applies RoPE after dequantization, and the dump's rope_style is none");
    m.spec = m.method->spec();
    m.calibration = m.method->calibration();
    m.bits = m.method->bits(shape.tokens, shape.head_dim);
    m.schedule = m.method->schedule(shape.tokens);
    out.push_back(std::move(m));
  }
  return out;
}

// Phase 2: one layer, checked, with only the selected queries kept, scaled, in place: (Hq, N, D).
LayerQKV load_layer(const LayerLoader& load, int64_t layer, const EvalShape& shape,
                    const std::vector<int64_t>& pos) {
  const int64_t T = shape.tokens, D = shape.head_dim, Hq = shape.num_q_heads, Hkv = shape.num_kv_heads;
  const int64_t N = pos.size();
  LayerQKV x = load(layer);
  check_tensor(x.q, {Hq, T, D}, layer, "q");
  check_tensor(x.k, {Hkv, T, D}, layer, "k");
  check_tensor(x.v, {Hkv, T, D}, layer, "v");
  if (shape.has_k_pre_rope && !x.k_pre_rope.shape.empty())
    check_tensor(x.k_pre_rope, {Hkv, T, D}, layer, "k_pre_rope");
  check_finite(x.q.view(), "eval: layer " + std::to_string(layer) + " q");
  for (int64_t h = 0; h < Hq; ++h) detail::gather_scaled(&x.q.data[h * T * D], pos, D, &x.q.data[h * N * D]);
  x.q.data.resize(Hq * N * D);
  x.q.data.shrink_to_fit();
  return x;
}

// Phase 3: every method's cache of KV head g, with its reconstruction errors recorded in the
// method's current layer. Methods run in parallel (core's loops inside run single-threaded
// then); an exception is rethrown after the loop, the first method's first.
std::vector<detail::HeadCache> apply_head(std::vector<MethodEval>& methods, const EvalShape& shape,
                                          const LayerQKV& x, int64_t layer, int64_t g) {
  const int64_t T = shape.tokens, D = shape.head_dim;
  const float* k = &x.k.data[g * T * D];
  const float* v = &x.v.data[g * T * D];
  HeadContext at{layer, g, {}, shape.rope_style, shape.rope_theta};
  if (!x.k_pre_rope.shape.empty()) at.k_pre_rope = {&x.k_pre_rope.data[g * T * D], DType::F32, {1, T, D}};
  const int M = methods.size();
  // Dumps captured in fp16 hold fp16 values: methods then read fp16 views (the same values,
  // minus a per-element rounding to fp16 in every call).
  const detail::HalfCopies half = detail::half_copies(k, v, T * D);
  const TensorView k_in =
      half.exact ? TensorView{half.k.data(), DType::F16, {1, T, D}} : TensorView{k, DType::F32, {1, T, D}};
  const TensorView v_in =
      half.exact ? TensorView{half.v.data(), DType::F16, {1, T, D}} : TensorView{v, DType::F32, {1, T, D}};
  std::vector<detail::HeadCache> caches(M);
  std::vector<std::exception_ptr> errors(M);
#pragma omp parallel for schedule(dynamic, 1)
  for (int mi = 0; mi < M; ++mi) {
    try {
      MethodEval& m = methods[mi];
      detail::HeadCache& c = caches[mi];
      if (m.method->needs_k_pre_rope() && !at.k_pre_rope.data)
        throw std::invalid_argument("eval: method '" + m.spec +
                                    "' needs k_pre_rope, which the loader did not read");
      c.r = m.method->apply(k_in, v_in, at);
      detail::finish_head_cache(k, v, T, D, m.schedule, c);
      LayerEval& le = m.layers.back();
      le.key[g] = c.key;
      le.value[g] = c.value;
    } catch (...) {
      errors[mi] = std::current_exception();
    }
  }
  for (const auto& e : errors)
    if (e) std::rethrow_exception(e);
  return caches;
}

// Phase 4: attention of KV head g's query heads against the reference and every method that
// changed the cache, accumulated into the methods' current layer. The reference runs even when
// no method needs computing: its ||O|| enters the identical methods' relative error (0 / ||O||).
void score_head(std::vector<MethodEval>& methods, const std::vector<detail::HeadCache>& caches,
                const LayerQKV& x, int64_t g, const EvalShape& shape, const std::vector<int64_t>& pos,
                const AttentionTiles& tiles, const AttentionBackend& backend, AttentionTimes* times) {
  const int64_t T = shape.tokens, D = shape.head_dim, N = pos.size();
  const int64_t group = shape.num_q_heads / shape.num_kv_heads;
  int64_t visible = 0;  // valid causal entries per head
  for (int64_t p : pos) visible += p + 1;
  detail::GroupJob job;
  for (const detail::HeadCache& c : caches)
    if (!c.identical) job.methods.push_back({c.r.k.data.data(), c.r.v.data.data()});
  job.q = &x.q.data[g * group * N * D];
  job.heads = group;
  job.N = N;
  job.D = D;
  job.pos = pos.data();
  job.k = &x.k.data[g * T * D];
  job.v = &x.v.data[g * T * D];
  job.tiles = tiles;
  detail::GroupResult gr;
  if (backend)
    backend(job, gr, times);
  else
    detail::run_group(job, gr, nullptr, times);
  for (int64_t h = 0; h < group; ++h) {
    int slot = 0;  // index among the computed methods
    for (size_t mi = 0; mi < methods.size(); ++mi) {
      AttnStats& a = methods[mi].layers.back().attn[g * group + h];
      if (!caches[mi].identical) {
        a = gr.stats[slot++][h];
        continue;
      }
      a.score_count = visible;
      a.queries = N;
      a.topk_sum = (double)N;
      a.out_sq_ref = gr.ref_sq[h];
    }
  }
}

// Phase 5: totals over the evaluated layers and heads.
void finish(std::vector<MethodEval>& methods) {
  for (auto& m : methods)
    for (const auto& le : m.layers) {
      m.key.merge(le.key_total());
      m.value.merge(le.value_total());
      m.attn.merge(le.attn_total());
    }
}

}  // namespace

bool eval_needs_k_pre_rope(const std::vector<std::string>& methods) {
  for (const auto& name : methods) {
    MethodPtr m;
    try {
      m = parse_method(name);
    } catch (const std::invalid_argument&) {
      continue;  // evaluate() reports it with the option named
    }
    if (m->needs_k_pre_rope()) return true;
  }
  return false;
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
  const int64_t T = shape.tokens, Hq = shape.num_q_heads, Hkv = shape.num_kv_heads;
  res.methods = resolve_methods(opt.methods.empty() ? default_eval_methods() : opt.methods, shape);
  const std::vector<int64_t> pos = select_queries(opt.queries, T);
  res.num_queries = pos.size();
  res.layers = resolve_layers(opt.layers, shape.num_layers);

  ScopedThreads threads(opt.threads);
  res.threads = threads.count();
  const int64_t total_layers = res.layers.last - res.layers.first + 1;
  // With prefetch, the next layer loads on a second thread while this one is computed; the
  // load phase then counts only the wait for it.
  std::future<LayerQKV> next;
  auto start_load = [&](int64_t layer) {
    return std::async(opt.prefetch ? std::launch::async : std::launch::deferred,
                      [&, layer] { return load_layer(load, layer, shape, pos); });
  };
  next = start_load(res.layers.first);
  for (int64_t layer = res.layers.first; layer <= res.layers.last; ++layer) {
    LayerQKV x;
    {
      PhaseTimer t(res.times.load, res.times.load_cpu);
      x = next.get();
    }
    if (layer < res.layers.last) next = start_load(layer + 1);
    for (auto& m : res.methods) {
      LayerEval le;
      le.layer = layer;
      le.key.resize(Hkv);
      le.value.resize(Hkv);
      le.attn.resize(Hq);
      m.layers.push_back(std::move(le));
    }
    for (int64_t g = 0; g < Hkv; ++g) {
      std::vector<detail::HeadCache> caches;
      {
        PhaseTimer t(res.times.quantize, res.times.quantize_cpu);
        caches = apply_head(res.methods, shape, x, layer, g);
      }
      PhaseTimer t(res.times.attention, res.times.attention_cpu);
      score_head(res.methods, caches, x, g, shape, pos, opt.tiles, opt.backend, &res.times.cpu);
    }
    if (opt.progress) opt.progress({layer - res.layers.first + 1, total_layers, since(t_start)});
  }
  finish(res.methods);
  res.times.total = since(t_start);
  res.times.total_cpu = process_cpu() - cpu_start;
  return res;
}

}  // namespace kvlab
