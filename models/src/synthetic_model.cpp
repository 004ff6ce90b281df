// The per-head parameters of the synthetic dump, drawn from (seed, layer, head) alone. The
// constants are chosen to land in the ranges the papers report for Llama-class models; the
// tests check the resulting properties, not the constants.
#include "synthetic_model.h"

#include <algorithm>
#include <cmath>

#include "synthetic_rng.h"

namespace kvlab::synth {
namespace {

constexpr double kPi = 3.14159265358979323846;

// Stream tags: each kind of draw has its own family of keys.
enum Tag : uint64_t {
  kGroupTag = 1,
  kQueryTag,
  kValueTag,
  kKeyNoise,
  kKeyLatent,
  kQueryNoise,
  kQueryLatent,
  kValueNoise,
  kValueTau
};

constexpr double kMeanRatio = 0.425;  // mean of a query head's outlier ratio, U(0.25, 0.6)

int64_t latent_rank(int64_t D) { return std::max<int64_t>(1, std::min<int64_t>(16, D / 2)); }

struct Outlier {
  int64_t pair;
  double magnitude, phi_k, phi_q;  // key mean along phi_k; queries and sinks along phi_q
};

// What the KV head and its q heads share.
struct Group {
  double level = 1;                   // typical key channel scale of this head
  std::vector<double> kscale, kmean;  // [D]
  std::vector<double> basis;          // [r][D]: latent directions with a decaying spectrum
  std::vector<Outlier> outliers;
  std::vector<int64_t> pos_pairs;  // fast pairs with a mean that queries share
  std::vector<double> pos_angle;
  double sink_eta = 1;  // sink outlier magnitude relative to the ordinary one
};

Group make_group(const SyntheticDumpParams& p, int64_t layer, int64_t g) {
  Stream s(stream_key(p.seed, kGroupTag, (uint64_t)layer, (uint64_t)g));
  const int64_t D = p.head_dim, P = D / 2, r = latent_rank(D);
  Group G;
  G.level = 0.8 + 0.4 * s.uniform();
  G.kscale.resize(D);
  G.kmean.resize(D);
  for (int64_t c = 0; c < D; ++c) {
    G.kscale[c] = G.level * std::exp(0.25 * s.normal());
    G.kmean[c] = 0.2 * G.kscale[c] * s.normal();
  }
  // Spectrum exp(-3i/r), normalized: a few latent directions carry most of the variance.
  std::vector<double> sp(r);
  double norm = 0;
  for (int64_t i = 0; i < r; ++i) norm += (sp[i] = std::exp(-3.0 * i / r)) * sp[i];
  G.basis.resize(r * D);
  for (int64_t i = 0; i < r; ++i)
    for (int64_t c = 0; c < D; ++c) G.basis[i * D + c] = sp[i] / std::sqrt(norm) * s.normal();
  // Outlier pairs in the slow (low-frequency) half, biased towards the slowest: their
  // post-RoPE magnitude stays put over long stretches of tokens, as in real keys. The first
  // lies in the slowest eighth and carries the sink (below), whose alignment with the queries
  // must survive the relative rotation t * w_j over thousands of tokens.
  const int64_t slow = P - P / 2;
  const int64_t n_out = std::min<int64_t>(slow, 1 + s.below(std::max<int64_t>(1, D / 32)));
  while ((int64_t)G.outliers.size() < n_out) {
    const double u = s.uniform();
    const int64_t j =
        G.outliers.empty() ? P - 1 - s.below(std::max<int64_t>(1, P / 8)) : P - 1 - (int64_t)(u * u * slow);
    if (std::any_of(G.outliers.begin(), G.outliers.end(), [&](const Outlier& o) { return o.pair == j; }))
      continue;
    Outlier o;
    o.pair = j;
    o.magnitude = G.level * (8.0 + 6.0 * s.uniform());
    o.phi_k = kPi / 5 + s.uniform() * kPi / 10 + (double)s.below(4) * kPi / 2;  // both channels large
    o.phi_q = o.phi_k + (s.uniform() - 0.5) * (2 * kPi / 3);
    G.outliers.push_back(o);
  }
  const int64_t fast = P / 2, n_pos = fast ? std::max<int64_t>(1, P / 8) : 0;
  while ((int64_t)G.pos_pairs.size() < n_pos) {
    const int64_t j = s.below(fast);
    if (std::find(G.pos_pairs.begin(), G.pos_pairs.end(), j) != G.pos_pairs.end()) continue;
    G.pos_pairs.push_back(j);
    G.pos_angle.push_back(2 * kPi * s.uniform());
  }
  // Sink keys replace the first outlier pair with a larger one along the queries' direction,
  // lifting a typical query head's score (outlier ratio kMeanRatio) by 6..14 in q.k/sqrt(D)
  // units: a large, head-dependent share of attention at a few thousand tokens that shrinks
  // with length, as in real models.
  if (!G.outliers.empty()) {
    const Outlier& o = G.outliers.front();
    const double m2 = o.magnitude * o.magnitude, boost = 6.0 + 8.0 * s.uniform();
    G.sink_eta =
        std::max(0.5, boost * std::sqrt((double)D) / (kMeanRatio * m2) + std::cos(o.phi_q - o.phi_k));
  }
  return G;
}

void add_pair(std::vector<float>& v, RopeStyle st, int64_t D, int64_t j, double mag, double phi) {
  const auto [a, b] = pair_channels(st, D, j);
  v[a] = (float)(v[a] + mag * std::cos(phi));
  v[b] = (float)(v[b] + mag * std::sin(phi));
}

// A model of D channels and an r-dimensional latent, all zero.
RowModel sized_model(int64_t D, int64_t r) {
  RowModel m;
  m.dim = D;
  m.rank = r;
  m.mean.resize(D);
  m.noise.resize(D);
  m.basis.resize(r * D);
  return m;
}

RowModel key_model(const SyntheticDumpParams& p, int64_t layer, int64_t g) {
  const Group G = make_group(p, layer, g);
  const int64_t D = p.head_dim, r = latent_rank(D);
  RowModel m = sized_model(D, r);
  // 70% of a channel's variance from the shared latent, 30% from its own noise.
  for (int64_t c = 0; c < D; ++c) {
    m.mean[c] = (float)G.kmean[c];
    m.noise[c] = (float)(G.kscale[c] * std::sqrt(0.3));
    for (int64_t i = 0; i < r; ++i)
      m.basis[i * D + c] = (float)(G.kscale[c] * std::sqrt(0.7) * G.basis[i * D + c]);
  }
  for (size_t i = 0; i < G.pos_pairs.size(); ++i)
    add_pair(m.mean, p.rope_style, D, G.pos_pairs[i], G.level, G.pos_angle[i]);
  m.sink_mean = m.mean;
  for (const Outlier& o : G.outliers) {
    add_pair(m.mean, p.rope_style, D, o.pair, o.magnitude, o.phi_k);
    if (&o == &G.outliers.front())
      add_pair(m.sink_mean, p.rope_style, D, o.pair, G.sink_eta * o.magnitude, o.phi_q);
    else
      add_pair(m.sink_mean, p.rope_style, D, o.pair, o.magnitude, o.phi_k);
    const auto [a, b] = pair_channels(p.rope_style, D, o.pair);
    m.noise[a] = m.noise[b] = (float)(0.12 * o.magnitude);
  }
  m.sink_tau = 0.5f;
  m.noise_key = stream_key(p.seed, kKeyNoise, (uint64_t)layer, (uint64_t)g);
  m.latent_key = stream_key(p.seed, kKeyLatent, (uint64_t)layer, (uint64_t)g);
  return m;
}

RowModel query_model(const SyntheticDumpParams& p, int64_t layer, int64_t h) {
  const int64_t g = h / (p.q_heads / p.kv_heads);
  const Group G = make_group(p, layer, g);
  Stream s(stream_key(p.seed, kQueryTag, (uint64_t)layer, (uint64_t)h));
  const int64_t D = p.head_dim, r = latent_rank(D);
  RowModel m = sized_model(D, r);
  // Per-head strengths: how much the head follows the outliers (the sink), content, position.
  const double ratio = 0.25 + 0.35 * s.uniform();
  // Content: q.k/sqrt(D) from the shared latent has std about `content` (log-normal around 1.8).
  const double content = 1.8 * std::exp(0.5 * s.normal());
  const double lambda = content / (std::sqrt(0.7) * std::sqrt((double)D));
  const double u = s.uniform(), local = 8.0 * u * u * u;
  for (int64_t c = 0; c < D; ++c) {
    const double scale = std::exp(0.25 * s.normal());
    m.mean[c] = (float)(0.2 * scale * s.normal());
    m.noise[c] = (float)(0.5 * scale);
    for (int64_t i = 0; i < r; ++i) m.basis[i * D + c] = (float)(lambda * G.basis[i * D + c]);
  }
  for (size_t i = 0; i < G.pos_pairs.size(); ++i)
    add_pair(m.mean, p.rope_style, D, G.pos_pairs[i], local, G.pos_angle[i]);
  for (const Outlier& o : G.outliers) add_pair(m.mean, p.rope_style, D, o.pair, ratio * o.magnitude, o.phi_q);
  m.sink_mean = m.mean;
  m.noise_key = stream_key(p.seed, kQueryNoise, (uint64_t)layer, (uint64_t)h);
  m.latent_key = stream_key(p.seed, kQueryLatent, (uint64_t)layer, (uint64_t)h);
  m.rotate = true;
  return m;
}

RowModel value_model(const SyntheticDumpParams& p, int64_t layer, int64_t g) {
  Stream s(stream_key(p.seed, kValueTag, (uint64_t)layer, (uint64_t)g));
  const int64_t D = p.head_dim;
  RowModel m;
  m.dim = D;
  m.mean.resize(D);
  m.noise.resize(D);
  const double level = 0.5 * (0.8 + 0.4 * s.uniform());
  for (int64_t c = 0; c < D; ++c) {
    const double scale = level * std::exp(0.15 * s.normal());
    m.noise[c] = (float)scale;
    m.mean[c] = (float)(0.1 * scale * s.normal());
  }
  m.sink_mean = m.mean;
  for (float& x : m.sink_mean) x *= 0.1f;  // sinks carry little value (they are a no-op)
  m.tau_sigma = 0.2f;
  m.sink_tau = 0.1f;
  m.noise_key = stream_key(p.seed, kValueNoise, (uint64_t)layer, (uint64_t)g);
  m.tau_key = stream_key(p.seed, kValueTau, (uint64_t)layer, (uint64_t)g);
  return m;
}

}  // namespace

std::pair<int64_t, int64_t> pair_channels(RopeStyle style, int64_t D, int64_t j) {
  if (style == RopeStyle::Halves) return {j, j + D / 2};
  return {2 * j, 2 * j + 1};
}

RowModel head_model(const SyntheticDumpParams& p, int64_t layer, Role role, int64_t head) {
  switch (role) {
    case Role::Q: return query_model(p, layer, head);
    case Role::K: {
      RowModel m = key_model(p, layer, head);
      m.rotate = true;
      return m;
    }
    case Role::KPreRope: return key_model(p, layer, head);
    case Role::V: return value_model(p, layer, head);
  }
  return {};
}

std::vector<int64_t> outlier_pairs(const SyntheticDumpParams& p, int64_t layer, int64_t kv_head) {
  std::vector<int64_t> out;
  for (const Outlier& o : make_group(p, layer, kv_head).outliers) out.push_back(o.pair);
  return out;
}

}  // namespace kvlab::synth
