// kvlab ppl's measurements. Each (method, window) runs the window through a simulating
// TransformerRunner (decode-faithful, so equal to a token-by-token loop within the bound of
// tests/models/decode_sim_test.cpp) in two blocks, and a greedy continuation of the first
// block (the window's first prompt_tokens), one token per forward.
#include "kvlab/ppl.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

#include "kvlab/decode_view.h"
#include "kvlab/threads.h"

namespace kvlab {
namespace {

// Per position log-softmax (double), and argmax.
struct Dist {
  std::vector<double> logp;  // rows x vocab
  std::vector<int32_t> top;
};

Dist log_softmax(const std::vector<float>& logits, int64_t rows, int64_t vocab) {
  Dist d{std::vector<double>(logits.size()), std::vector<int32_t>(rows)};
  for (int64_t r = 0; r < rows; ++r) {
    const float* x = &logits[r * vocab];
    const int64_t top = std::max_element(x, x + vocab) - x;
    double sum = 0;
    for (int64_t i = 0; i < vocab; ++i) sum += std::exp((double)x[i] - x[top]);
    const double lse = x[top] + std::log(sum);
    for (int64_t i = 0; i < vocab; ++i) d.logp[r * vocab + i] = x[i] - lse;
    d.top[r] = (int32_t)top;
  }
  return d;
}

TransformerRunner make_runner(const TransformerWeights& w, int64_t tokens, const MethodPtr& m,
                              const std::vector<bool>& layers) {
  TransformerRunner r(w, tokens);
  r.simulate({m, layers});
  return r;
}

// One window: the teacher-forced distributions of all n positions and the greedy continuation
// of its first p tokens. The window runs as two blocks, [0, p) and [p, n); the greedy run
// continues a copy of the cache after the first (decode-faithful views do not depend on the
// block split), so the prompt costs nothing extra.
struct WindowRun {
  Dist dist;
  std::vector<int32_t> generated;
};

WindowRun run_window(const TransformerWeights& w, const int32_t* tokens, int64_t n, int64_t p, int64_t steps,
                     const MethodPtr& m, const std::vector<bool>& layers) {
  const int64_t V = w.config.vocab_size;
  TransformerRunner r = make_runner(w, n, m, layers);
  std::vector<float> logits, rest;
  r.forward(tokens, p, p, logits);
  TransformerRunner g = r;
  const std::vector<float> first(logits.end() - V, logits.end());
  if (n > p) r.forward(tokens + p, n - p, n - p, rest);
  logits.insert(logits.end(), rest.begin(), rest.end());
  WindowRun out{log_softmax(logits, n, V), {}};
  // One token per forward is too little work to share: a team's barriers cost more than the
  // products (13x the CPU time on the loaded 2-core VM).
  ScopedThreads one(1);
  std::vector<float> step = first;
  for (int64_t s = 0; s < steps; ++s) {
    const int32_t next = (int32_t)(std::max_element(step.begin(), step.end()) - step.begin());
    out.generated.push_back(next);
    if (s + 1 < steps) g.forward(&next, 1, 1, step);
  }
  return out;
}

// The stats of one window against the reference's distribution (null: the reference itself).
PplStats window_stats(const Dist& d, const Dist* ref, const int32_t* tokens, int64_t n, int64_t vocab) {
  PplStats s;
  for (int64_t i = 0; i + 1 < n; ++i) s.nll_sum -= d.logp[i * vocab + tokens[i + 1]];
  s.predicted = n - 1;
  s.ppl = std::exp(s.nll_sum / (double)s.predicted);
  if (!ref) return s;
  double kl_sum = 0;
  int64_t agree = 0;
  for (int64_t i = 0; i < n; ++i) {
    double kl = 0;
    for (int64_t v = 0; v < vocab; ++v) {
      const double lr = ref->logp[i * vocab + v];
      kl += std::exp(lr) * (lr - d.logp[i * vocab + v]);
    }
    kl = std::max(kl, 0.0);  // rounding below zero when the two are equal
    kl_sum += kl;
    s.kl_max = std::max(s.kl_max, kl);
    agree += d.top[i] == ref->top[i];
  }
  s.kl_mean = kl_sum / (double)n;
  s.top1_agreement = (double)agree / (double)n;
  return s;
}

PplStats pool(const std::vector<PplStats>& w, int64_t window) {
  PplStats s;
  for (const PplStats& x : w) {
    s.nll_sum += x.nll_sum;
    s.predicted += x.predicted;
    s.kl_mean += x.kl_mean * (double)window;
    s.kl_max = std::max(s.kl_max, x.kl_max);
    s.top1_agreement += x.top1_agreement * (double)window;
    s.greedy_divergence += x.greedy_divergence;
  }
  const double positions = (double)window * (double)w.size();
  s.ppl = std::exp(s.nll_sum / (double)s.predicted);
  s.kl_mean /= positions;
  s.top1_agreement /= positions;
  s.greedy_divergence /= (double)w.size();
  return s;
}

// The wrapped method on the chosen key channels only: its keys there, fp16 elsewhere and for
// every value. Exact for per-channel key quantizers (kivi, int8): a channel's bytes depend on
// that channel alone.
class KeyChannels final : public Method {
 public:
  KeyChannels(MethodPtr base, std::vector<int64_t> channels)
      : base_(std::move(base)), ch_(std::move(channels)) {
    name_ = base_->spec() + " (key channels only)";
  }
  const std::string& family() const override { return base_->family(); }
  std::string spec() const override { return name_; }
  Schedule schedule(int64_t T) const override { return base_->schedule(T); }
  Bits bits(int64_t T, int64_t D) const override { return base_->bits(T, D); }
  Schedule decode_schedule(int64_t n) const override { return base_->decode_schedule(n); }
  int64_t decode_apply_tokens(int64_t n) const override { return base_->decode_apply_tokens(n); }
  void check_model(const ModelShape& s) const override { base_->check_model(s); }
  bool needs_k_pre_rope() const override { return base_->needs_k_pre_rope(); }
  Reconstruction apply(const TensorView& k, const TensorView& v, const HeadContext& at) const override {
    Reconstruction r = base_->apply(k, v, at);
    Reconstruction keep = parse_method("fp16")->apply(k, v, at);
    const int64_t D = k.shape.back();
    std::vector<bool> on(D, false);
    for (int64_t c : ch_) on[c] = true;
    for (size_t i = 0; i < r.k.data.size(); ++i)
      if (!on[i % D]) r.k.data[i] = keep.k.data[i];
    r.v = std::move(keep.v);
    return r;
  }

 private:
  MethodPtr base_;
  std::vector<int64_t> ch_;
  std::string name_;
};

MethodPtr with_key_channels(MethodPtr m, const std::vector<int64_t>& channels) {
  return channels.empty() ? m : std::make_shared<const KeyChannels>(std::move(m), channels);
}

}  // namespace

void check_ppl(const TransformerConfig& c, int64_t context, int64_t tokens, const PplOptions& o) {
  auto fail = [](const std::string& s) { throw std::invalid_argument(s); };
  if (tokens < 2) fail("the text has " + std::to_string(tokens) + " tokens; perplexity needs at least 2");
  if (o.window < 2) fail("--window " + std::to_string(o.window) + " must be >= 2");
  if (o.window > context)
    fail("--window " + std::to_string(o.window) + " exceeds the model's context of " +
         std::to_string(context) + " tokens");
  if (o.windows < 1) fail("--windows must be >= 1");
  if (o.window * o.windows > tokens)
    fail("--windows " + std::to_string(o.windows) + " of --window " + std::to_string(o.window) + " need " +
         std::to_string(o.window * o.windows) + " tokens; the text has " + std::to_string(tokens));
  if (o.prompt_tokens < 1 || o.generate_tokens < 1 || o.prompt_tokens + o.generate_tokens > o.window)
    fail("--prompt-tokens " + std::to_string(o.prompt_tokens) + " + --generate " +
         std::to_string(o.generate_tokens) + " must be >= 1 each and fit the window of " +
         std::to_string(o.window));
  if (!o.layers.empty() && (int64_t)o.layers.size() != c.n_layers) fail("--quant-layers: wrong layer count");
  for (int64_t ch : o.key_channels)
    if (ch < 0 || ch >= c.head_dim)
      fail("--key-channels: channel " + std::to_string(ch) + " outside the head dim " +
           std::to_string(c.head_dim));
  for (const std::string& spec : o.methods) {
    const MethodPtr m = parse_method(spec);
    try {
      check_decodable(*m);
      m->check_model({c.n_layers, c.n_kv_heads, c.head_dim});
    } catch (const std::invalid_argument& e) {
      fail(std::string("--methods ") + spec + ": " + e.what());
    }
    // each quantized layer (KV head) by its own method's rule (plan: one method per layer or head)
    bool quantizes = false;
    for (int64_t l = 0; l < c.n_layers; ++l)
      for (int64_t h = 0; h < c.n_kv_heads; ++h) {
        if (!o.layers.empty() && !o.layers[l]) continue;
        const Method& lm = head_method(*m, l, h);
        const bool per_head = &lm != &layer_method(*m, l);
        const UniformParams* u = lm.uniform();
        if (u && u->group > o.window)
          fail("--methods " + spec +
               (&lm == m.get()
                    ? ""
                    : " (layer " + std::to_string(l) + (per_head ? ", KV head " + std::to_string(h) : "") +
                          ": " + lm.spec() + ")") +
               ": its group of " + std::to_string(u->group) + " tokens exceeds the window of " +
               std::to_string(o.window) + " tokens; no group would be quantized");
        const Schedule s = lm.decode_schedule(o.window);
        quantizes = quantizes || s.key_end > s.key_begin || s.value_end > s.value_begin;
      }
    if (m->family() != "fp16" && !quantizes)
      fail("--methods " + spec + " quantizes no token of a " + std::to_string(o.window) + "-token window");
  }
}

PplResult evaluate_ppl(const TransformerWeights& w, int64_t context, const std::vector<int32_t>& tokens,
                       const PplOptions& o) {
  const TransformerConfig& c = w.config;
  check_ppl(c, context, (int64_t)tokens.size(), o);
  const int64_t W = o.window, V = c.vocab_size;
  PplResult res{W, o.windows, o.prompt_tokens, o.generate_tokens, {}, {}, {}, {}};
  for (int64_t l = 0; l < c.n_layers; ++l)
    if (o.layers.empty() || o.layers[l]) res.quantized_layers.push_back(l);
  const MethodPtr fp16 = parse_method("fp16");
  std::vector<MethodPtr> methods;
  for (const std::string& s : o.methods)
    methods.push_back(with_key_channels(parse_method(s), o.key_channels));
  res.methods.resize(methods.size());
  for (size_t i = 0; i < methods.size(); ++i) {
    res.methods[i].name = o.methods[i];
    res.methods[i].spec = methods[i]->spec();
    res.methods[i].bits_per_element = methods[i]->bits(W, c.head_dim).both();
    res.methods[i].calibration = methods[i]->calibration();
  }
  for (int64_t win = 0; win < o.windows; ++win) {
    const int32_t* t = tokens.data() + win * W;
    const WindowRun ref_run = run_window(w, t, W, o.prompt_tokens, o.generate_tokens, fp16, o.layers);
    const Dist& ref = ref_run.dist;
    const std::vector<int32_t>& ref_gen = ref_run.generated;
    res.reference_windows.push_back(window_stats(ref, nullptr, t, W, V));
    if (o.progress)
      o.progress("window " + std::to_string(win + 1) + "/" + std::to_string(o.windows) +
                 ": fp16 reference ppl " + std::to_string(res.reference_windows.back().ppl));
    for (size_t i = 0; i < methods.size(); ++i) {
      const WindowRun run = run_window(w, t, W, o.prompt_tokens, o.generate_tokens, methods[i], o.layers);
      PplStats s = window_stats(run.dist, &ref, t, W, V);
      const std::vector<int32_t>& gen = run.generated;
      s.greedy_divergence =
          (double)(std::mismatch(gen.begin(), gen.end(), ref_gen.begin()).first - gen.begin());
      res.methods[i].per_window.push_back(s);
      if (o.progress)
        o.progress("window " + std::to_string(win + 1) + "/" + std::to_string(o.windows) + ": " +
                   o.methods[i] + " ppl " + std::to_string(s.ppl));
    }
  }
  res.reference = pool(res.reference_windows, W);
  for (PplMethodResult& m : res.methods) {
    m.all = pool(m.per_window, W);
    m.delta_ppl = m.all.ppl - res.reference.ppl;
  }
  return res;
}

}  // namespace kvlab
