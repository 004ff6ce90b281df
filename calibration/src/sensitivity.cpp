// The sensitivity driver: layers one at a time, K_hat - K per KV head, query heads x query
// tiles in parallel, partial sums reduced in a fixed order (same results for any thread count).
#include "kvlab/sensitivity.h"

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <future>
#include <stdexcept>
#include <string>

#include "kvlab/quantizer.h"
#include "kvlab/rank_stats.h"
#include "kvlab/threads.h"
#include "sensitivity_kernel.h"

namespace kvlab {
namespace {

constexpr int64_t kQueryTile = 64;

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void check_options(const SensitivityOptions& o, int64_t T) {
  auto fail = [](const std::string& m) { throw std::invalid_argument("sensitivity: " + m); };
  if (o.bits < 1 || o.bits > 8) fail("--bits " + std::to_string(o.bits) + " is outside 1..8");
  if (o.group < 1) fail("--group " + std::to_string(o.group) + " must be at least 1");
  if (o.sink < 0) fail("--sink " + std::to_string(o.sink) + " must not be negative");
  if (T < (int64_t)o.sink + o.group)
    fail("the dump's " + std::to_string(T) + " tokens hold no whole group of --group " +
         std::to_string(o.group) + " after the --sink " + std::to_string(o.sink) +
         " tokens, so no key would be quantized (need T >= " + std::to_string(o.sink + o.group) + ")");
}

QuantizerSpec channel_quantizer(const SensitivityOptions& o) {
  QuantizerSpec s;
  s.scheme = Scheme::Asym;
  s.bits = o.bits;
  s.axis = Axis::Channel;
  s.group = o.group;
  s.params = o.params;
  s.profile = o.profile;
  return s;
}

}  // namespace

std::vector<ChannelStats> channel_stats(const float* k, int64_t D, int64_t begin, int64_t end) {
  // Token-major passes (contiguous rows), each channel's sums still in token order.
  std::vector<double> sum(D, 0.0), sum_abs(D, 0.0), mx(D, 0.0), mean(D), var(D, 0.0);
  const double n = (double)(end - begin);
  for (int64_t t = begin; t < end; ++t)
    for (int64_t c = 0; c < D; ++c) {
      const double x = k[t * D + c];
      sum[c] += x;
      sum_abs[c] += std::abs(x);
      mx[c] = std::max(mx[c], std::abs(x));
    }
  for (int64_t c = 0; c < D; ++c) mean[c] = sum[c] / n;
  // two passes: a large mean (outlier channels) would swamp sum x^2
  for (int64_t t = begin; t < end; ++t)
    for (int64_t c = 0; c < D; ++c) var[c] += (k[t * D + c] - mean[c]) * (k[t * D + c] - mean[c]);
  std::vector<ChannelStats> st(D);
  for (int64_t c = 0; c < D; ++c) st[c] = {sum_abs[c] / n, mx[c], var[c] / n};
  return st;
}

void layer_sensitivity(int64_t layer, const Tensor& q, const Tensor& k, const std::vector<int64_t>& positions,
                       const SensitivityOptions& o, std::vector<SensitivityRow>& rows) {
  const int64_t Hq = q.shape[0], Hkv = k.shape[0], T = k.shape[1], D = k.shape[2], group = Hq / Hkv;
  check_options(o, T);
  const int64_t kb = std::min<int64_t>(o.sink, T), n = (T - kb) / o.group * o.group;
  // Every channel quantized at once: channels are independent, so column c of K_hat is what
  // quantizing channel c alone gives.
  Tensor part;
  part.shape = {Hkv, n, D};
  part.data.resize(Hkv * n * D);
  for (int64_t g = 0; g < Hkv; ++g) std::copy_n(&k.data[(g * T + kb) * D], n * D, &part.data[g * n * D]);
  std::vector<float> khat;
  if (!o.codec || !o.codec->uniform(part.view(), channel_quantizer(o), khat))
    khat = dequantize(quantize(part.view(), channel_quantizer(o)));
  std::vector<double> kd(k.data.begin(), k.data.end()), delta(Hkv * D * n), absmax(Hkv * D, 0.0);
#pragma omp parallel for num_threads(resolve_threads(o.threads))
  for (int64_t g = 0; g < Hkv; ++g)
    for (int64_t j = 0; j < n; ++j)
      for (int64_t c = 0; c < D; ++c) {
        const double d = (double)khat[(g * n + j) * D + c] - (double)part.data[(g * n + j) * D + c];
        delta[(g * D + c) * n + j] = d;
        absmax[g * D + c] = std::max(absmax[g * D + c], std::abs(d));
      }
  const int64_t tiles = ((int64_t)positions.size() + kQueryTile - 1) / kQueryTile;
  const int64_t nq = (int64_t)positions.size();
  // A device computes each KV head's sums (abc[g]: rows h * nq + i of its query heads).
  const bool device = o.backend && !o.naive;
  std::vector<std::vector<double>> abc(device ? Hkv : 0), s0(device ? Hkv : 0);
  for (int64_t g = 0; device && g < Hkv; ++g) {
    SensitivityUnit u;
    u.q = &q.data[g * group * T * D];
    u.heads = group;
    u.T = T;
    u.D = D;
    u.k = &kd[g * T * D];
    u.delta = &delta[g * D * n];
    u.delta_absmax = &absmax[g * D];
    u.kb = kb;
    u.n = n;
    u.positions = positions.data();
    u.count = nq;
    o.backend(u, abc[g], s0[g]);
    if ((int64_t)abc[g].size() != group * nq * D * 3 || (int64_t)s0[g].size() != group * nq)
      throw std::logic_error("sensitivity: the device returned sums of the wrong size");
  }
  std::vector<double> partial(Hq * tiles * D, 0.0);
#pragma omp parallel for schedule(dynamic, 1) num_threads(resolve_threads(o.threads))
  for (int64_t w = 0; w < Hq * tiles; ++w) {
    const int64_t h = w / tiles, tile = w % tiles, g = h / group;
    detail::HeadTask t;
    t.q = &q.data[h * T * D];
    t.k = &kd[g * T * D];
    t.delta = &delta[g * D * n];
    t.delta_absmax = &absmax[g * D];
    t.T = T;
    t.D = D;
    t.kb = kb;
    t.n = n;
    t.positions = positions.data() + tile * kQueryTile;
    t.count = std::min<int64_t>(kQueryTile, (int64_t)positions.size() - tile * kQueryTile);
    if (device) {
      const int64_t row = (h % group) * nq + tile * kQueryTile;
      detail::tile_sensitivity_from_sums(t, &abc[g][row * D * 3], &s0[g][row], &partial[w * D]);
    } else if (o.naive)
      detail::tile_sensitivity_naive(t, &partial[w * D]);
    else
      detail::tile_sensitivity_fast(t, &partial[w * D]);
  }
  double count = 0;
  for (int64_t p : positions) count += (double)(p + 1);
  std::vector<std::vector<ChannelStats>> stats(Hkv);  // per KV head, shared by its query heads
#pragma omp parallel for num_threads(resolve_threads(o.threads))
  for (int64_t g = 0; g < Hkv; ++g) stats[g] = channel_stats(&k.data[g * T * D], D, kb, kb + n);
  for (int64_t h = 0; h < Hq; ++h) {
    const int64_t g = h / group;
    const std::vector<ChannelStats>& st = stats[g];
    for (int64_t c = 0; c < D; ++c) {
      double s = 0;
      for (int64_t tile = 0; tile < tiles; ++tile) s += partial[(h * tiles + tile) * D + c];
      rows.push_back({layer, g, h, c, s / count, st[c]});
    }
  }
  // rows come out by q head; order by (kv_head, q_head, channel) is the same since h ascends with g
}

std::vector<RankingRow> rank_layer(const std::vector<SensitivityRow>& rows, int64_t layer,
                                   int64_t num_kv_heads, int64_t head_dim) {
  std::vector<RankingRow> out;
  for (int64_t g = 0; g < num_kv_heads; ++g) {
    std::vector<double> sens(head_dim, 0.0), mag(head_dim, 0.0);
    int64_t heads = 0;
    for (const SensitivityRow& r : rows) {
      if (r.layer != layer || r.kv_head != g) continue;
      sens[r.channel] += r.attn_score_mse;
      mag[r.channel] = r.stats.mean_abs;
      if (r.channel == 0) ++heads;
    }
    if (heads == 0) continue;
    for (double& s : sens) s /= (double)heads;
    RankingRow rr;
    rr.layer = layer;
    rr.kv_head = g;
    rr.spearman = spearman(mag, sens);
    for (int64_t div : {16, 8, 4}) {
      rr.ks.push_back(head_dim / div);
      rr.recall.push_back(top_k_recall(sens, mag, head_dim / div));
    }
    out.push_back(rr);
  }
  return out;
}

SensitivityResult sensitivity_plan(const EvalShape& shape, const SensitivityOptions& o) {
  check_options(o, shape.tokens);
  SensitivityResult r;
  r.shape = shape;
  r.layers = resolve_layers(o.layers, shape.num_layers);
  r.num_queries = (int64_t)select_queries(o.queries, shape.tokens).size();
  r.key_begin = std::min<int64_t>(o.sink, shape.tokens);
  r.key_end = r.key_begin + (shape.tokens - r.key_begin) / o.group * o.group;
  return r;
}

void head_sensitivity(int64_t layer, int64_t g, const Tensor& q, const Tensor& k,
                      const std::vector<int64_t>& positions, const SensitivityOptions& o,
                      std::vector<SensitivityRow>& rows) {
  const size_t first = rows.size();
  const int64_t group = q.shape[0];
  layer_sensitivity(layer, q, k, positions, o, rows);
  for (size_t i = first; i < rows.size(); ++i) {
    rows[i].kv_head += g;
    rows[i].q_head += g * group;
  }
}

SensitivityResult channel_sensitivity(const EvalShape& shape, const LayerLoader& load,
                                      const SensitivityOptions& o) {
  const auto t0 = std::chrono::steady_clock::now();
  SensitivityResult r = sensitivity_plan(shape, o);
  const std::vector<int64_t> positions = select_queries(o.queries, shape.tokens);
  // With a device the CPU is mostly idle: read layer l + 1 on a second thread meanwhile
  // (load_seconds is then the wait for it).
  std::future<LayerQKV> next;
  if (o.backend) next = std::async(std::launch::async, load, r.layers.first);
  for (int64_t l = r.layers.first; l <= r.layers.last; ++l) {
    const auto tl = std::chrono::steady_clock::now();
    const LayerQKV x = o.backend ? next.get() : load(l);
    if (o.backend && l < r.layers.last) next = std::async(std::launch::async, load, l + 1);
    r.load_seconds += seconds_since(tl);
    const std::vector<int64_t> qs{shape.num_q_heads, shape.tokens, shape.head_dim},
        ks{shape.num_kv_heads, shape.tokens, shape.head_dim};
    if (x.q.shape != qs || x.k.shape != ks)
      throw std::invalid_argument("sensitivity: layer " + std::to_string(l) + " has q " +
                                  shape_string(x.q.shape) + " and k " + shape_string(x.k.shape) +
                                  "; expected " + shape_string(qs) + " and " + shape_string(ks));
    std::vector<SensitivityRow> rows;
    layer_sensitivity(l, x.q, x.k, positions, o, rows);
    for (const RankingRow& rr : rank_layer(rows, l, shape.num_kv_heads, shape.head_dim))
      r.rankings.push_back(rr);
    r.rows.insert(r.rows.end(), rows.begin(), rows.end());
    if (o.progress)
      o.progress({l - r.layers.first + 1, r.layers.last - r.layers.first + 1, seconds_since(t0)});
  }
  r.seconds = seconds_since(t0);
  return r;
}

}  // namespace kvlab
