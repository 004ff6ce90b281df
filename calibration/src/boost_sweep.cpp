// The boost sweep: per layer, every (selector, rate, seed) cache through core's Kitty method,
// scored in batches by eval's attention reference; see boost_sweep.h.
#include "kvlab/boost_sweep.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <stdexcept>

#include "kvlab/attention.h"
#include "kvlab/kv_text.h"
#include "kvlab/sensitivity.h"
#include "kvlab/threads.h"

namespace kvlab {
namespace {

constexpr size_t kCacheBatch = 6;  // caches scored per attention pass (memory: 2 x layer each)

void fail(const std::string& m) { throw std::invalid_argument("boost-sweep: " + m); }

// Heads' tokens [b, e) of a (H, T, D) tensor.
Tensor token_slice(const Tensor& x, int64_t b, int64_t e) {
  const int64_t H = x.shape[0], T = x.shape[1], D = x.shape[2];
  Tensor out;
  out.shape = {H, e - b, D};
  out.data.resize(H * (e - b) * D);
  for (int64_t h = 0; h < H; ++h)
    std::copy_n(&x.data[(h * T + b) * D], (e - b) * D, &out.data[h * (e - b) * D]);
  return out;
}

// Oracle scores per (kv head, channel): attention-score MSE on the calibration prefix, averaged
// over the KV head's query heads.
std::vector<double> oracle_scores(const LayerQKV& x, const UniformParams& m, int64_t calib,
                                  int64_t calib_queries, int threads) {
  SensitivityOptions so;
  so.bits = m.kbits;
  so.group = m.group;
  so.sink = m.sink;
  so.params = m.params;
  so.profile = m.profile;
  so.threads = threads;
  so.queries = {QuerySelection::Mode::Last, std::min(calib_queries, calib)};
  const Tensor q = token_slice(x.q, 0, calib), k = token_slice(x.k, 0, calib);
  std::vector<SensitivityRow> rows;
  layer_sensitivity(0, q, k, select_queries(so.queries, calib), so, rows);
  const int64_t D = k.shape[2], per = q.shape[0] / k.shape[0];
  std::vector<double> score(k.shape[0] * D, 0.0);
  for (const SensitivityRow& r : rows) score[r.kv_head * D + r.channel] += r.attn_score_mse / (double)per;
  return score;
}

// PrefixMagnitude scores per (kv head, channel): mean |k| over the prefix's quantized keys.
std::vector<double> prefix_magnitude(const LayerQKV& x, const UniformParams& m, int64_t calib) {
  const int64_t Hkv = x.k.shape[0], T = x.k.shape[1], D = x.k.shape[2];
  const int64_t kb = std::min<int64_t>(m.sink, calib), ke = kb + (calib - kb) / m.group * m.group;
  std::vector<double> score(Hkv * D);
  for (int64_t g = 0; g < Hkv; ++g) {
    const std::vector<ChannelStats> st = channel_stats(&x.k.data[g * T * D], D, kb, ke);
    for (int64_t c = 0; c < D; ++c) score[g * D + c] = st[c].mean_abs;
  }
  return score;
}

}  // namespace

std::vector<double> parse_rates(const std::string& list) {
  std::vector<double> out;
  size_t start = 0;
  while (true) {
    const size_t comma = list.find(',', start);
    const std::string item =
        list.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    const double r = text::parse_double(item, "--rates");
    if (!(r >= 0.0 && r <= 1.0)) throw std::invalid_argument("--rates: " + item + " is outside [0, 1]");
    out.push_back(r);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

std::vector<SweepSummary> summarize(const std::vector<SweepRow>& rows) {
  std::vector<SweepSummary> out;
  std::map<std::pair<int, double>, size_t> at;
  std::vector<std::vector<const SweepRow*>> groups;
  for (const SweepRow& r : rows) {
    const auto key = std::make_pair((int)r.selector, r.rate);
    if (!at.count(key)) {
      at[key] = groups.size();
      groups.emplace_back();
    }
    groups[at[key]].push_back(&r);
  }
  for (const auto& g : groups) {
    SweepSummary s;
    s.selector = g[0]->selector;
    s.rate = g[0]->rate;
    s.boost_k = g[0]->boost_k;
    s.bits = g[0]->bits.both();
    s.runs = (int)g.size();
    s.score_mse_min = INFINITY;
    s.score_mse_max = -INFINITY;
    for (const SweepRow* r : g) {
      const double e = r->attn.score_mse();
      s.score_mse_mean += e / s.runs;
      s.out_err_mean += r->attn.out_rel_err() / s.runs;
      s.score_mse_min = std::min(s.score_mse_min, e);
      s.score_mse_max = std::max(s.score_mse_max, e);
    }
    if (s.runs > 1 && s.score_mse_min < s.score_mse_max) {  // sample standard deviation over seeds
      double a = 0, b = 0;
      for (const SweepRow* r : g) {
        a += std::pow(r->attn.score_mse() - s.score_mse_mean, 2);
        b += std::pow(r->attn.out_rel_err() - s.out_err_mean, 2);
      }
      s.score_mse_std = std::sqrt(a / (s.runs - 1));
      s.out_err_std = std::sqrt(b / (s.runs - 1));
    }
    out.push_back(s);
  }
  return out;
}

SweepPlan sweep_plan(const EvalShape& shape, const SweepOptions& o) {
  const int64_t T = shape.tokens, D = shape.head_dim;
  SweepPlan plan;
  plan.base = parse_method(o.method);
  const MethodPtr& base = plan.base;
  if (base->family() != "kitty") fail("--method " + o.method + " is not a kitty method");
  const UniformParams& m = *base->uniform();
  if (o.rates.empty()) fail("--rates is empty");
  for (double r : o.rates)
    if (!(r >= 0.0 && r <= 1.0)) fail("rate " + text::format_double(r) + " is outside [0, 1]");
  if (o.selectors.empty()) fail("--selectors is empty");
  if (o.seeds < 1) fail("--seeds " + std::to_string(o.seeds) + " must be at least 1");
  const Schedule sched = base->schedule(T);
  if (sched.key_end <= sched.key_begin)
    fail(std::to_string(T) + " tokens hold no whole key page of group " + std::to_string(m.group) +
         " after sink " + std::to_string(m.sink) + " (need T >= " + std::to_string(m.sink + m.group) +
         "): every selector would be the same");
  SweepResult& res = plan.result;
  res.shape = shape;
  res.method = base->spec();
  res.layers = resolve_layers(o.layers, shape.num_layers);
  plan.oracle = std::find(o.selectors.begin(), o.selectors.end(), Selector::Oracle) != o.selectors.end();
  plan.prefix_magnitude =
      std::find(o.selectors.begin(), o.selectors.end(), Selector::PrefixMagnitude) != o.selectors.end();
  res.calib_tokens = o.calib_tokens > 0 ? o.calib_tokens : T / 2;
  if (res.calib_tokens >= T)
    fail("--calib-tokens " + std::to_string(res.calib_tokens) + " leaves no token to evaluate");
  if ((plan.oracle || plan.prefix_magnitude) && res.calib_tokens < (int64_t)m.sink + m.group)
    fail("--calib-tokens " + std::to_string(res.calib_tokens) +
         " holds no key group for the static selectors (need >= sink " + std::to_string(m.sink) +
         " + group " + std::to_string(m.group) + ")");
  QuerySelection qsel = o.queries;
  if (qsel.mode == QuerySelection::Mode::Last && qsel.n == 0)
    qsel.n = std::min<int64_t>(256, T - res.calib_tokens);
  plan.positions = select_queries(qsel, T);
  if (plan.positions.front() < res.calib_tokens)
    fail("--queries " + to_string(qsel) + " starts at position " + std::to_string(plan.positions.front()) +
         ", inside the calibration prefix of " + std::to_string(res.calib_tokens) +
         " tokens (--calib-tokens)");
  res.num_queries = (int64_t)plan.positions.size();
  res.first_query = plan.positions.front();
  for (Selector s : o.selectors)
    for (double r : o.rates) {
      if (s == Selector::Random)
        for (int seed = 0; seed < o.seeds; ++seed) res.rows.push_back({s, r, seed, 0, {}, {}});
      else
        res.rows.push_back({s, r, -1, 0, {}, {}});
    }
  for (SweepRow& row : res.rows) {
    plan.at_rate.push_back(kitty_with_boost(*base, row.rate));
    row.boost_k = boost_count((int)D, row.rate);
    row.bits = plan.at_rate.back()->bits(T, D);
  }
  return plan;
}

std::vector<std::vector<AttnStats>> sweep_heads(const SweepPlan& plan, const LayerQKV& x, int64_t first_head,
                                                const SweepOptions& o) {
  const SweepResult& res = plan.result;
  const UniformParams& m = *plan.base->uniform();
  const Schedule sched = plan.base->schedule(res.shape.tokens);
  const std::vector<double> scores =
      plan.oracle ? oracle_scores(x, m, res.calib_tokens, o.calib_queries, o.threads) : std::vector<double>{};
  const std::vector<double> mags =
      plan.prefix_magnitude ? prefix_magnitude(x, m, res.calib_tokens) : std::vector<double>{};
  const Tensor range = token_slice(x.k, sched.key_begin, sched.key_end);
  const size_t R = res.rows.size();
  std::vector<std::vector<AttnStats>> out(R);
  for (size_t b = 0; b < R; b += kCacheBatch) {
    const size_t e = std::min(R, b + kCacheBatch);
    std::vector<Reconstruction> caches;
    for (size_t i = b; i < e; ++i) {
      const Method& mr = *plan.at_rate[i];
      const SweepRow& row = res.rows[i];
      if (row.selector == Selector::Magnitude) {  // core's own ranking: the paper's method, byte for byte
        HeadContext at;
        at.codec = o.codec.get();
        caches.push_back(mr.apply(x.k.view(), x.v.view(), at));
      } else {
        const std::vector<int32_t> ch =
            select_boost_channels(row.selector, range, m.group, row.boost_k, (uint64_t)row.seed,
                                  row.selector == Selector::Oracle ? scores : mags, first_head);
        caches.push_back(apply_kitty(mr, x.k.view(), x.v.view(), ch));
      }
    }
    auto err = attention_errors(x.q.view(), x.k.view(), x.v.view(), caches, plan.positions, o.backend);
    for (size_t i = b; i < e; ++i) out[i] = std::move(err[i - b]);
  }
  return out;
}

SweepResult boost_sweep(const EvalShape& shape, const LayerLoader& load, const SweepOptions& o) {
  const auto t0 = std::chrono::steady_clock::now();
  SweepPlan plan = sweep_plan(shape, o);
  SweepResult& res = plan.result;
  ScopedThreads threads(o.threads);
  for (int64_t l = res.layers.first; l <= res.layers.last; ++l) {
    const std::vector<std::vector<AttnStats>> err = sweep_heads(plan, load(l), 0, o);
    for (size_t i = 0; i < res.rows.size(); ++i)
      for (const AttnStats& a : err[i]) res.rows[i].attn.merge(a);
    if (o.progress)
      o.progress({l - res.layers.first + 1, res.layers.last - res.layers.first + 1,
                  std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count()});
  }
  res.summary = summarize(res.rows);
  res.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return std::move(res);
}

}  // namespace kvlab
