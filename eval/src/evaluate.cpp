// The evaluation driver: layer by layer, KV head by KV head, every method against the reference.
#include "kvlab/evaluate.h"

#include <chrono>
#include <cstring>
#include <exception>
#include <future>
#include <stdexcept>

#include "group.h"
#include "head_cache.h"
#include "kvlab/threads.h"
#include "kvlab/timing.h"

namespace kvlab {

namespace {

using timing::Clock;
using timing::process_cpu;
using timing::since;

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

// Phase 3: the cache of KV head g for each method of `which` (indices into methods), with its
// reconstruction errors recorded in the method's slot of `layer`. k_pre_rope: the head's keys
// before RoPE (T, D), or null. Methods run in parallel (core's loops inside run single-threaded
// then); an exception is rethrown after the loop, the first method's first.
std::vector<detail::HeadCache> apply_head(std::vector<MethodEval>& methods, const std::vector<int>& which,
                                          int64_t li, int64_t layer, int64_t g, const float* k,
                                          const float* v, const float* k_pre_rope, const EvalShape& shape,
                                          const Codec* codec) {
  const int64_t T = shape.tokens, D = shape.head_dim;
  HeadContext at{layer, g, {}, shape.rope_style, shape.rope_theta, codec};
  if (k_pre_rope) at.k_pre_rope = {k_pre_rope, DType::F32, {1, T, D}};
  const int M = which.size();
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
  for (int i = 0; i < M; ++i) {
    try {
      MethodEval& m = methods[which[i]];
      detail::HeadCache& c = caches[i];
      if (m.method->needs_k_pre_rope() && !at.k_pre_rope.data)
        throw std::invalid_argument("eval: method '" + m.spec +
                                    "' needs k_pre_rope, which the loader did not read");
      c.r = m.method->apply(k_in, v_in, at);
      detail::finish_head_cache(k, v, T, D, m.schedule, c);
      LayerEval& le = m.layers[li];
      le.key[g] = c.key;
      le.value[g] = c.value;
    } catch (...) {
      errors[i] = std::current_exception();
    }
  }
  for (const auto& e : errors)
    if (e) std::rethrow_exception(e);
  return caches;
}

// Phase 4: attention of KV head g's query heads (q: (group, N, D), selected and scaled) against
// the reference and each method of `which` that changed the cache, into the methods' slot of
// layer li. The reference runs even when no method needs computing: its ||O|| enters the
// identical methods' relative error (0 / ||O||). A method's sums do not depend on which other
// methods share the pass (each has its own accumulators), so units may be split by method.
void score_head(std::vector<MethodEval>& methods, const std::vector<int>& which,
                const std::vector<detail::HeadCache>& caches, int64_t li, int64_t g, const float* q,
                const float* k, const float* v, const EvalShape& shape, const std::vector<int64_t>& pos,
                const EvalOptions& opt, AttentionTimes* times) {
  const int64_t D = shape.head_dim, N = pos.size();
  const int64_t group = shape.num_q_heads / shape.num_kv_heads;
  int64_t visible = 0;  // valid causal entries per head
  for (int64_t p : pos) visible += p + 1;
  detail::GroupJob job;
  for (const detail::HeadCache& c : caches)
    if (!c.identical) job.methods.push_back({c.r.k.data.data(), c.r.v.data.data()});
  job.q = q;
  job.heads = group;
  job.N = N;
  job.D = D;
  job.pos = pos.data();
  job.k = k;
  job.v = v;
  job.tiles = opt.tiles;
  job.topk = opt.topk;
  detail::GroupResult gr;
  if (opt.backend)
    opt.backend(job, gr, times);
  else
    detail::run_group(job, gr, nullptr, times);
  for (int64_t h = 0; h < group; ++h) {
    int slot = 0;  // index among the computed methods
    for (size_t i = 0; i < which.size(); ++i) {
      AttnStats& a = methods[which[i]].layers[li].attn[g * group + h];
      if (!caches[i].identical) {
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

// One unit group: KV head g of layer `layer` for the methods `which`; q holds the group's
// selected, scaled queries (group, N, D), k and v the head (T, D), k_pre_rope its keys before RoPE
// or null. Both evaluate() and eval_head come here; opt's backend computes the attention unit.
void run_head(EvalResult& r, const std::vector<int>& which, int64_t layer, int64_t g, const float* q,
              const float* k, const float* v, const float* k_pre_rope, const std::vector<int64_t>& pos,
              const EvalOptions& opt) {
  const int64_t li = layer - r.layers.first;
  std::vector<detail::HeadCache> caches;
  {
    PhaseTimer t(r.times.quantize, r.times.quantize_cpu);
    caches = apply_head(r.methods, which, li, layer, g, k, v, k_pre_rope, r.shape, opt.codec.get());
  }
  PhaseTimer t(r.times.attention, r.times.attention_cpu);
  score_head(r.methods, which, caches, li, g, q, k, v, r.shape, pos, opt, &r.times.cpu);
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

EvalResult eval_plan(const EvalShape& shape, const EvalOptions& opt) {
  check_shape(shape);
  EvalResult res;
  res.shape = shape;
  res.queries = opt.queries;
  res.tiles = opt.tiles;
  if (opt.tiles.query_tile < 1 || opt.tiles.key_tile < 1)
    throw std::invalid_argument("eval: tile sizes must be >= 1 (query_tile " +
                                std::to_string(opt.tiles.query_tile) + ", key_tile " +
                                std::to_string(opt.tiles.key_tile) + ")");
  res.methods = resolve_methods(opt.methods.empty() ? default_eval_methods() : opt.methods, shape);
  res.num_queries = select_queries(opt.queries, shape.tokens).size();
  res.layers = resolve_layers(opt.layers, shape.num_layers);
  for (auto& m : res.methods)
    for (int64_t layer = res.layers.first; layer <= res.layers.last; ++layer) {
      LayerEval le;
      le.layer = layer;
      le.key.resize(shape.num_kv_heads);
      le.value.resize(shape.num_kv_heads);
      le.attn.resize(shape.num_q_heads);
      m.layers.push_back(std::move(le));
    }
  return res;
}

void eval_head(EvalResult& r, int64_t layer, int64_t g, const std::vector<int>& which, HeadQKV x,
               const EvalOptions& opt) {
  const EvalShape& s = r.shape;
  const int64_t T = s.tokens, D = s.head_dim, group = s.num_q_heads / s.num_kv_heads;
  if (layer < r.layers.first || layer > r.layers.last || g < 0 || g >= s.num_kv_heads)
    throw std::invalid_argument("eval: unit (layer " + std::to_string(layer) + ", kv head " +
                                std::to_string(g) + ") is outside the planned layers and heads");
  for (int i : which)
    if (i < 0 || i >= (int)r.methods.size())
      throw std::invalid_argument("eval: method index " + std::to_string(i) + " is outside the plan");
  const std::string at = "layer " + std::to_string(layer) + " kv head " + std::to_string(g);
  check_tensor(x.q, {group, T, D}, layer, "q");
  check_tensor(x.k, {1, T, D}, layer, "k");
  check_tensor(x.v, {1, T, D}, layer, "v");
  check_finite(x.q.view(), "eval: " + at + " q");
  const std::vector<int64_t> pos = select_queries(r.queries, T);
  const int64_t N = pos.size();
  for (int64_t h = 0; h < group; ++h)
    detail::gather_scaled(&x.q.data[h * T * D], pos, D, &x.q.data[h * N * D]);
  if (!x.k_pre_rope.shape.empty()) check_tensor(x.k_pre_rope, {1, T, D}, layer, "k_pre_rope");
  run_head(r, which, layer, g, x.q.data.data(), x.k.data.data(), x.v.data.data(),
           x.k_pre_rope.shape.empty() ? nullptr : x.k_pre_rope.data.data(), pos, opt);
}

void eval_finish(EvalResult& r) { finish(r.methods); }

EvalResult evaluate(const EvalShape& shape, const LayerLoader& load, const EvalOptions& opt) {
  const auto t_start = Clock::now();
  const double cpu_start = process_cpu();
  EvalResult res = eval_plan(shape, opt);
  const int64_t T = shape.tokens, D = shape.head_dim, Hkv = shape.num_kv_heads;
  const int64_t group = shape.num_q_heads / Hkv;
  const std::vector<int64_t> pos = select_queries(opt.queries, T);
  const int64_t N = pos.size();
  std::vector<int> all(res.methods.size());
  for (size_t i = 0; i < all.size(); ++i) all[i] = (int)i;

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
    const bool pre_rope = !x.k_pre_rope.shape.empty();
    for (int64_t g = 0; g < Hkv; ++g)
      run_head(res, all, layer, g, &x.q.data[g * group * N * D], &x.k.data[g * T * D], &x.v.data[g * T * D],
               pre_rope ? &x.k_pre_rope.data[g * T * D] : nullptr, pos, opt);
    if (opt.progress) opt.progress({layer - res.layers.first + 1, total_layers, since(t_start)});
  }
  eval_finish(res);
  res.times.total = since(t_start);
  res.times.total_cpu = process_cpu() - cpu_start;
  return res;
}

}  // namespace kvlab
