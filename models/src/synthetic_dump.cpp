// SyntheticDump: presets, checks, and the block-parallel generation loop (the model of the data
// is in synthetic_dump.h, its parameters in synthetic_model.cpp).
#include "kvlab/synthetic_dump.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <stdexcept>

#include "kvlab/half_rows.h"
#include "kvlab/sizes.h"
#include "synthetic_model.h"
#include "synthetic_rng.h"

namespace kvlab {

using synth::kBlock;

namespace {

// One row per preset: the table behind synthetic_preset and the lists of valid names.
struct PresetShape {
  const char* name;
  int64_t layers, q_heads, kv_heads, head_dim, tokens;
  double rope_theta;
};
constexpr PresetShape kPresets[] = {
    {"llama3-8b", 32, 32, 8, 128, 4096, 500000.0},
    {"llama2-7b", 32, 32, 32, 128, 4096, 10000.0},
    {"qwen3-8b", 36, 32, 8, 128, 4096, 1000000.0},
    {"tiny", 2, 4, 2, 16, 256, 10000.0},
};

}  // namespace

std::string synthetic_preset_choices() {
  std::string out;
  for (const auto& row : kPresets) out += (out.empty() ? "" : ", ") + std::string(row.name);
  return out;
}

SyntheticDumpParams synthetic_preset(const std::string& name) {
  for (const auto& row : kPresets) {
    if (name != row.name) continue;
    SyntheticDumpParams p;
    p.preset = name;
    p.layers = row.layers;
    p.q_heads = row.q_heads;
    p.kv_heads = row.kv_heads;
    p.head_dim = row.head_dim;
    p.tokens = row.tokens;
    p.rope_theta = row.rope_theta;
    return p;
  }
  throw std::invalid_argument("unknown synthetic preset '" + name +
                              "' (valid: " + synthetic_preset_choices() + ")");
}

// cos and sin of t * w_j for every token t and pair j, [T][D/2]: shared by all heads and layers.
struct SyntheticDump::RopeTable {
  int64_t pairs = 0;
  std::vector<float> cos, sin;
};

namespace {

std::string describe(const SyntheticDumpParams& p) {
  char b[512];
  std::snprintf(
      b, sizeof b,
      "kvlab synthetic generator v1: preset %s, seed %llu, layers %lld, q_heads %lld, kv_heads %lld, "
      "head_dim %lld, tokens %lld, rope %s theta %g, sink_tokens %lld",
      p.preset.c_str(), (unsigned long long)p.seed, (long long)p.layers, (long long)p.q_heads,
      (long long)p.kv_heads, (long long)p.head_dim, (long long)p.tokens, to_string(p.rope_style),
      p.rope_theta, (long long)p.sink_tokens);
  return b;
}

// RoPE on one pair; -ffp-contract=off keeps each product and the sum separately rounded.
inline void rotate_pair(float& x, float& y, float c, float s) {
  const float a = x, b = y;
  x = c * a - s * b;
  y = s * a + c * b;
}

// One block of one head: rows [t0, t0 + n) into tile (n x D), rounded to fp16, rotated if asked.
struct Scratch {
  std::vector<float> eps, latent, tau;
};

void block_rows(const synth::RowModel& m, int64_t block, int64_t n, int64_t sink_tokens, const float* cosT,
                const float* sinT, int64_t pairs, RopeStyle style, Scratch& s, float* tile) {
  const int64_t D = m.dim, r = m.rank, t0 = block * kBlock;
  const auto key = [&](uint64_t k) { return splitmix64_mix(k + splitmix64_mix((uint64_t)block + 1)); };
  s.eps.resize(kBlock * D);
  s.latent.resize(kBlock * std::max<int64_t>(r, 1));
  s.tau.resize(kBlock);
  synth::fill_gauss(key(m.noise_key), s.eps.data(), n * D);
  if (r) synth::fill_gauss(key(m.latent_key), s.latent.data(), n * r);
  if (m.tau_sigma != 0) {
    synth::fill_gauss(key(m.tau_key), s.tau.data(), n);
    for (int64_t i = 0; i < n; ++i) s.tau[i] = synth::portable_exp_small(m.tau_sigma * s.tau[i]);
  }
  for (int64_t i = 0; i < n; ++i) {
    const int64_t t = t0 + i;
    const bool sink = t < sink_tokens;
    const float* mean = sink ? m.sink_mean.data() : m.mean.data();
    const float tau = sink ? m.sink_tau : m.tau_sigma != 0 ? s.tau[i] : 1.0f;
    float* row = tile + i * D;
    const float* eps = s.eps.data() + i * D;
    for (int64_t c = 0; c < D; ++c) row[c] = mean[c];
    for (int64_t k = 0; k < r; ++k) {
      const float z = s.latent[i * r + k];
      const float* basis = m.basis.data() + k * D;
      for (int64_t c = 0; c < D; ++c) row[c] += z * basis[c];
    }
    for (int64_t c = 0; c < D; ++c) row[c] = row[c] + tau * (m.noise[c] * eps[c]);
    round_to_half_n(row, D);
    if (!m.rotate || style == RopeStyle::None) continue;
    // Pair j is (a, b) = (2j, 2j+1) or (j, j + D/2): synth::pair_channels, unrolled per style.
    const float* cs = cosT + t * pairs;
    const float* sn = sinT + t * pairs;
    if (style == RopeStyle::Adjacent)
      for (int64_t j = 0; j < pairs; ++j) rotate_pair(row[2 * j], row[2 * j + 1], cs[j], sn[j]);
    else
      for (int64_t j = 0; j < pairs; ++j) rotate_pair(row[j], row[j + D / 2], cs[j], sn[j]);
    round_to_half_n(row, D);
  }
}

inline void store(float* out, const float* tile, int64_t n) { std::copy(tile, tile + n, out); }
inline void store(uint16_t* out, const float* tile, int64_t n) { float_to_half_n(tile, out, n); }  // exact

}  // namespace

SyntheticDump::SyntheticDump(const SyntheticDumpParams& p) : p_(p), name_("synthetic:" + p.preset) {
  info_.model = name_;
  info_.num_layers = p.layers;
  info_.num_q_heads = p.q_heads;
  info_.num_kv_heads = p.kv_heads;
  info_.head_dim = p.head_dim;
  info_.tokens = p.tokens;
  info_.rope_theta = p.rope_theta;
  info_.rope_style = p.rope_style;
  info_.k_after_rope = true;
  info_.has_k_pre_rope = p.k_pre_rope;
  info_.dtype = CaptureDtype::F16;
  info_.source = describe(p);
  info_.validate("synthetic dump '" + p.preset + "'");
  if (!(p.rope_theta > 0) || !std::isfinite(p.rope_theta))
    throw std::invalid_argument("synthetic dump '" + p.preset + "': rope_theta must be positive, got " +
                                std::to_string(p.rope_theta));
  if (p.sink_tokens < 0)
    throw std::invalid_argument("synthetic dump '" + p.preset + "': sink_tokens must be >= 0, got " +
                                std::to_string(p.sink_tokens));
  // A layer's q is the largest tensor made at once (as fp32 when read); its size and the whole
  // dump's must be sizes, not wrapped-around numbers.
  const std::string where = "synthetic dump '" + p.preset + "'";
  checked_product({p.layers, p.q_heads, p.tokens, p.head_dim, 2},
                  where + ": layers x q heads x tokens x head_dim x 2 bytes");
  checked_product({p.layers, p.kv_heads, p.tokens, p.head_dim, 6},
                  where + ": layers x kv heads x tokens x head_dim x 6 bytes");
  check_fits_memory(checked_product({p.q_heads, p.tokens, p.head_dim}, where), 4, where + ": one layer's q");
}

SyntheticDump::~SyntheticDump() = default;

const SyntheticDump::RopeTable& SyntheticDump::rope() const {
  std::call_once(rope_once_, [this] { rope_ = build_rope(); });
  return *rope_;
}

std::unique_ptr<SyntheticDump::RopeTable> SyntheticDump::build_rope() const {
  auto tab = std::make_unique<RopeTable>();
  const int64_t T = p_.tokens, D = p_.head_dim, P = D / 2;
  tab->pairs = P;
  if (p_.rope_style != RopeStyle::None) {
    tab->cos.resize(T * P);
    tab->sin.resize(T * P);
    std::vector<double> w(P);
    for (int64_t j = 0; j < P; ++j) w[j] = std::pow(p_.rope_theta, -(double)(2 * j) / (double)D);
#pragma omp parallel for schedule(static)
    for (int64_t t = 0; t < T; ++t)
      for (int64_t j = 0; j < P; ++j) {
        const double angle = (double)t * w[j];
        tab->cos[t * P + j] = (float)std::cos(angle);
        tab->sin[t * P + j] = (float)std::sin(angle);
      }
  }
  return tab;
}

template <class Out>
static void generate_into(const SyntheticDumpParams& p, int64_t layer, Role role, int64_t hb, int64_t he,
                          const float* cosT, const float* sinT, int64_t pairs, Out* out) {
  const int64_t T = p.tokens, D = p.head_dim, blocks = (T + kBlock - 1) / kBlock;
  std::vector<synth::RowModel> models;
  for (int64_t h = hb; h < he; ++h) models.push_back(synth::head_model(p, layer, role, h));
  const int64_t units = (he - hb) * blocks;
#pragma omp parallel
  {
    Scratch s;
    std::vector<float> tile(kBlock * D);
#pragma omp for schedule(dynamic, 1)
    for (int64_t u = 0; u < units; ++u) {
      const int64_t h = u / blocks, b = u % blocks, n = std::min(kBlock, T - b * kBlock);
      block_rows(models[h], b, n, p.sink_tokens, cosT, sinT, pairs, p.rope_style, s, tile.data());
      store(out + (h * T + b * kBlock) * D, tile.data(), n * D);
    }
  }
}

template <class Out>
void SyntheticDump::generate_any(int64_t layer, Role role, int64_t hb, int64_t he, Out* out) const {
  check_request(layer, role, hb);
  if (he <= hb)
    throw std::invalid_argument(name_ + ": empty head range [" + std::to_string(hb) + ", " +
                                std::to_string(he) + ")");
  check_request(layer, role, he - 1);
  const RopeTable& r = rope();
  generate_into(p_, layer, role, hb, he, r.cos.data(), r.sin.data(), r.pairs, out);
}

void SyntheticDump::generate(int64_t layer, Role role, int64_t hb, int64_t he, float* out) const {
  generate_any(layer, role, hb, he, out);
}

void SyntheticDump::generate_f16(int64_t layer, Role role, int64_t hb, int64_t he, uint16_t* out) const {
  generate_any(layer, role, hb, he, out);
}

Tensor SyntheticDump::read(int64_t layer, Role role) const {
  check_request(layer, role, 0);
  Tensor t;
  t.shape = info_.shape(role);
  t.data.resize(numel(t.shape));
  generate(layer, role, 0, info_.heads(role), t.data.data());
  return t;
}

Tensor SyntheticDump::read_head(int64_t layer, Role role, int64_t head) const {
  check_request(layer, role, head);
  Tensor t;
  t.shape = {1, info_.tokens, info_.head_dim};
  t.data.resize(numel(t.shape));
  generate(layer, role, head, head + 1, t.data.data());
  return t;
}

std::vector<int64_t> SyntheticDump::outlier_channels(int64_t layer, int64_t kv_head) const {
  check_request(layer, Role::K, kv_head);
  std::vector<int64_t> out;
  for (int64_t j : synth::outlier_pairs(p_, layer, kv_head)) {
    const auto [a, b] = synth::pair_channels(p_.rope_style, p_.head_dim, j);
    out.push_back(a);
    out.push_back(b);
  }
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace kvlab
