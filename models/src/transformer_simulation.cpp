// Decode-faithful simulation of a KV method in the decoder (docs/FORMATS.md section 12). The
// cache holds fp16 k and v; after each block, a quantized layer's heads are rebuilt once by
// decode_final (every step's quantized bytes), and query position t takes key/value row j from
// those bytes when j is in the method's decode_schedule(t + 1), from fp16 otherwise. A block of
// queries therefore computes what a token-by-token decode loop computes: columns quantized for
// every row of the block, for none, and (near group and window boundaries) for some rows, where
// both products are formed and each row picks its own.
#include <Eigen/Core>
#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

#include "kvlab/decode_view.h"
#include "kvlab/half.h"
#include "kvlab/transformer.h"

namespace kvlab {

void TransformerRunner::simulate(CacheSimulation sim) {
  const TransformerConfig& c = w_.config;
  if (!sim.method) throw std::invalid_argument("simulate: no method");
  if (!sim.layers.empty() && (int64_t)sim.layers.size() != c.n_layers)
    throw std::invalid_argument("simulate: a layer list of " + std::to_string(sim.layers.size()) +
                                " entries for a model of " + std::to_string(c.n_layers) + " layers");
  if (pos_ != 0) throw std::logic_error("simulate: set before the first forward");
  check_decodable(*sim.method);
  sim.method->check_model({c.n_layers, c.n_kv_heads, c.head_dim});
  quantizes_.assign(c.n_layers, false);
  for (int64_t l = 0; l < c.n_layers; ++l)
    for (int64_t h = 0; h < c.n_kv_heads; ++h) {
      const Schedule last = head_method(*sim.method, l, h).decode_schedule(max_tokens_);  // ranges only grow
      quantizes_[l] = quantizes_[l] || last.key_end > last.key_begin || last.value_end > last.value_begin;
    }
  sim_ = std::move(sim);
  simulating_ = true;
  kq_.assign(c.n_layers, {});
  vq_.assign(c.n_layers, {});
}

bool TransformerRunner::quantized(int64_t layer) const {
  return simulating_ && quantizes_[layer] && (sim_.layers.empty() || sim_.layers[layer]);
}

void TransformerRunner::quantize_cache(int64_t layer, int64_t p0, int64_t n) {
  const TransformerConfig& c = w_.config;
  const int64_t D = c.head_dim, P = p0 + n;
  for (int64_t h = 0; h < c.n_kv_heads; ++h)
    for (std::vector<float>* x : {&k_[layer], &v_[layer], &k_pre_[layer]}) {
      float* rows = x->data() + (h * max_tokens_ + p0) * D;
      for (int64_t i = 0; i < n * D; ++i) rows[i] = round_to_half(rows[i]);
    }
  if (!quantized(layer)) return;
  const size_t size = (size_t)(c.n_kv_heads * max_tokens_ * D);
  kq_[layer].resize(size);
  vq_[layer].resize(size);
  // Methods that quantize keys before RoPE (kvquant) get the fp16 pre-RoPE keys and the model's
  // RoPE; their rotated keys are compared with k_ as any other method's. Each KV head by its own
  // method (a per-head plan).
  for (int64_t h = 0; h < c.n_kv_heads; ++h) {
    const int64_t at = h * max_tokens_ * D;
    const TensorView k{k_[layer].data() + at, DType::F32, {1, P, D}},
        v{v_[layer].data() + at, DType::F32, {1, P, D}};
    const bool pre = head_method(*sim_.method, layer, h).needs_k_pre_rope();
    HeadContext ctx{layer, h};
    if (pre) ctx = {layer, h, {k_pre_[layer].data() + at, DType::F32, {1, P, D}}, c.rope_style, c.rope_theta};
    const Reconstruction r = decode_final(*sim_.method, k, v, ctx);
    std::copy(r.k.data.begin(), r.k.data.end(), kq_[layer].begin() + at);
    std::copy(r.v.data.begin(), r.v.data.end(), vq_[layer].begin() + at);
  }
}

namespace {

using RowMajor = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using ConstMap = Eigen::Map<const RowMajor>;
using StridedMap = Eigen::Map<RowMajor, 0, Eigen::OuterStride<>>;

struct Range {
  int64_t begin = 0, end = 0;
  bool has(int64_t j) const { return in_range(j, begin, end); }
  bool empty() const { return end <= begin; }
};

enum Kind { kFp16, kQuantized, kMixed };  // for every row of the block, none, or some
struct Segment {
  int64_t a, b;
  Kind kind;
};

// Columns [0, keys) cut where the kind changes. Ranges grow from row to row (checked), so a
// column in the first row's range is quantized for every row, one in the last row's only for some.
std::vector<Segment> segments(const std::vector<Range>& r, int64_t keys) {
  for (size_t i = 1; i < r.size(); ++i)
    if (!r[i - 1].empty() && (r[i].begin > r[i - 1].begin || r[i].end < r[i - 1].end))
      throw std::logic_error("decode schedule shrinks between steps");
  std::vector<Segment> out;
  for (int64_t j = 0; j < keys; ++j) {
    const Kind k = r.front().has(j) ? kQuantized : r.back().has(j) ? kMixed : kFp16;
    if (out.empty() || out.back().kind != k)
      out.push_back({j, j + 1, k});
    else
      out.back().b = j + 1;
  }
  return out;
}

}  // namespace

void TransformerRunner::simulated_attention(int64_t layer, int64_t p0, int64_t n, float* out) const {
  const TransformerConfig& c = w_.config;
  const int64_t D = c.head_dim, group = c.n_heads / c.n_kv_heads, q_dim = c.n_heads * D;
  constexpr int64_t kRows = 64;
  const int64_t row_blocks = (n + kRows - 1) / kRows, tasks = c.n_heads * row_blocks;
  const float scale = 1.0f / std::sqrt((float)D);
#pragma omp parallel for schedule(dynamic) if (c.n_heads * n * (p0 + n) * D >= (1L << 18))
  for (int64_t task = 0; task < tasks; ++task) {
    const int64_t h = task / row_blocks, r0 = (task % row_blocks) * kRows, rows = std::min(kRows, n - r0);
    const int64_t keys = p0 + r0 + rows, kv = (h / group) * max_tokens_ * D;
    const Method& m = head_method(*sim_.method, layer, h / group);  // the KV head's rule
    const ConstMap Q(q_[layer].data() + (h * max_tokens_ + p0 + r0) * D, rows, D);
    const float *K16 = k_[layer].data() + kv, *Kq = kq_[layer].data() + kv, *V16 = v_[layer].data() + kv,
                *Vq = vq_[layer].data() + kv;
    std::vector<Range> kr(rows), vr(rows);
    for (int64_t i = 0; i < rows; ++i) {
      const Schedule s = m.decode_schedule(p0 + r0 + i + 1);
      kr[i] = {s.key_begin, s.key_end};
      vr[i] = {s.value_begin, s.value_end};
    }
    RowMajor S(rows, keys);
    for (const Segment& g : segments(kr, keys)) {
      const int64_t len = g.b - g.a;
      auto block = S.middleCols(g.a, len);
      block.noalias() = Q * ConstMap((g.kind == kQuantized ? Kq : K16) + g.a * D, len, D).transpose();
      if (g.kind != kMixed) continue;
      const RowMajor alt = Q * ConstMap(Kq + g.a * D, len, D).transpose();
      for (int64_t i = 0; i < rows; ++i)
        for (int64_t j = 0; j < len; ++j)
          if (kr[i].has(g.a + j)) block(i, j) = alt(i, j);
    }
    for (int64_t i = 0; i < rows; ++i) {  // softmax as attention_block
      const int64_t seen = p0 + r0 + i + 1;
      float* s = S.data() + i * keys;
      float mx = -INFINITY, sum = 0.0f;
      for (int64_t j = 0; j < seen; ++j) mx = std::max(mx, s[j] *= scale);
      for (int64_t j = 0; j < seen; ++j) sum += (s[j] = std::exp(s[j] - mx));
      for (int64_t j = 0; j < seen; ++j) s[j] /= sum;
      std::fill(s + seen, s + keys, 0.0f);
    }
    RowMajor O = RowMajor::Zero(rows, D);
    for (const Segment& g : segments(vr, keys)) {
      const int64_t len = g.b - g.a;
      const ConstMap V(V16 + g.a * D, len, D), Vhat(Vq + g.a * D, len, D);
      if (g.kind != kMixed) {
        O.noalias() += S.middleCols(g.a, len) * (g.kind == kQuantized ? Vhat : V);
        continue;
      }
      RowMajor Pq = S.middleCols(g.a, len), Pf = Pq;
      for (int64_t i = 0; i < rows; ++i)
        for (int64_t j = 0; j < len; ++j) (vr[i].has(g.a + j) ? Pf : Pq)(i, j) = 0.0f;
      O.noalias() += Pq * Vhat;
      O.noalias() += Pf * V;
    }
    StridedMap(out + r0 * q_dim + h * D, rows, D, Eigen::OuterStride<>(q_dim)) = O;
  }
}

}  // namespace kvlab
