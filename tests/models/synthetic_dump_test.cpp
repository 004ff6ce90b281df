// The synthetic dump generator: determinism, shapes, the statistics it promises (key outlier
// channels, RoPE, values without outliers, attention sinks, non-uniform attention) and errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <stdexcept>

#include "../../models/src/synthetic_rng.h"
#include "kvlab/half.h"
#include "kvlab/synthetic_dump.h"
#include "kvlab/threads.h"

namespace kvlab {
namespace {

SyntheticDumpParams tiny(uint64_t seed = 0, int64_t tokens = 256) {
  SyntheticDumpParams p = synthetic_preset("tiny");
  p.seed = seed;
  p.tokens = tokens;
  p.k_pre_rope = true;
  return p;
}

bool same_bytes(const Tensor& a, const Tensor& b) {
  return a.shape == b.shape && std::memcmp(a.data.data(), b.data.data(), a.data.size() * sizeof(float)) == 0;
}

const Role kRoles[] = {Role::Q, Role::K, Role::V, Role::KPreRope};

// Mean |x| per channel of head h over tokens [t0, t1) of a (H, T, D) tensor.
std::vector<double> mean_abs(const Tensor& x, int64_t h, int64_t t0, int64_t t1) {
  const int64_t T = x.shape[1], D = x.shape[2];
  std::vector<double> m(D, 0.0);
  for (int64_t t = t0; t < t1; ++t)
    for (int64_t c = 0; c < D; ++c) m[c] += std::fabs(x.data[(h * T + t) * D + c]) / (double)(t1 - t0);
  return m;
}

double median(std::vector<double> v) {
  std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
  return v[v.size() / 2];
}

std::vector<int64_t> top_channels(const std::vector<double>& m, size_t n) {
  std::vector<int64_t> idx(m.size());
  std::iota(idx.begin(), idx.end(), 0);
  std::stable_sort(idx.begin(), idx.end(), [&](int64_t a, int64_t b) { return m[a] > m[b]; });
  idx.resize(n);
  std::sort(idx.begin(), idx.end());
  return idx;
}

TEST(SyntheticDump, SameSeedSameBytesOtherSeedOtherBytes) {
  const SyntheticDump a(tiny(7)), b(tiny(7)), c(tiny(8));
  for (Role r : kRoles) {
    EXPECT_TRUE(same_bytes(a.read(1, r), b.read(1, r))) << to_string(r);
    EXPECT_FALSE(same_bytes(a.read(1, r), c.read(1, r))) << to_string(r);
  }
  EXPECT_FALSE(same_bytes(a.read(0, Role::K), a.read(1, Role::K)));  // layers differ
}

TEST(SyntheticDump, ReadHeadIsTheSliceOfRead) {
  const SyntheticDump d(tiny(3));
  for (Role r : kRoles) {
    const Tensor all = d.read(1, r);
    const int64_t n = d.info().tokens * d.info().head_dim;
    for (int64_t h = 0; h < d.info().heads(r); ++h) {
      const Tensor one = d.read_head(1, r, h);
      ASSERT_EQ(one.shape, (std::vector<int64_t>{1, d.info().tokens, d.info().head_dim}));
      EXPECT_EQ(0, std::memcmp(one.data.data(), all.data.data() + h * n, n * sizeof(float)))
          << to_string(r) << " head " << h;
    }
  }
}

TEST(SyntheticDump, Fp16OutputIsTheRoundedFp32Output) {
  const SyntheticDump d(tiny(4));
  for (Role r : kRoles) {
    const Tensor x = d.read(0, r);
    std::vector<uint16_t> h(x.data.size());
    d.generate_f16(0, r, 0, d.info().heads(r), h.data());
    for (size_t i = 0; i < h.size(); ++i)
      ASSERT_EQ(h[i], float_to_half(x.data[i])) << to_string(r) << " " << i;
  }
}

TEST(SyntheticDump, ThreadCountDoesNotChangeBytes) {
  SyntheticDumpParams p = tiny(5, 1000);  // many blocks, a partial last one
  p.q_heads = 8;
  p.kv_heads = 4;
  const SyntheticDump d(p);
  auto read_with = [&](int threads, Role r) {
    const kvlab::ScopedThreads scope(threads);
    return d.read(1, r);
  };
  for (Role r : kRoles) {
    const Tensor one = read_with(1, r);
    const Tensor two = read_with(2, r);
    const Tensor three = read_with(3, r);
    EXPECT_TRUE(same_bytes(one, two)) << to_string(r);
    EXPECT_TRUE(same_bytes(one, three)) << to_string(r);
  }
}

TEST(SyntheticDump, ShorterDumpIsAPrefixOfLongerOne) {
  const SyntheticDump shortd(tiny(6, 100)), longd(tiny(6, 256));  // 100: not a block multiple
  for (Role r : kRoles) {
    const Tensor a = shortd.read(0, r), b = longd.read(0, r);
    const int64_t D = a.shape[2];
    for (int64_t h = 0; h < a.shape[0]; ++h)
      EXPECT_EQ(
          0, std::memcmp(a.data.data() + h * 100 * D, b.data.data() + h * 256 * D, 100 * D * sizeof(float)))
          << to_string(r) << " head " << h;
  }
}

TEST(SyntheticDump, PresetsAndShapes) {
  const SyntheticDump l3(synthetic_preset("llama3-8b"));
  const DumpInfo& i = l3.info();
  EXPECT_EQ(i.num_layers, 32);
  EXPECT_EQ(i.num_q_heads, 32);
  EXPECT_EQ(i.num_kv_heads, 8);
  EXPECT_EQ(i.head_dim, 128);
  EXPECT_EQ(i.tokens, 4096);
  EXPECT_EQ(i.rope_theta, 500000.0);
  EXPECT_EQ(i.rope_style, RopeStyle::Adjacent);
  EXPECT_EQ(i.dtype, CaptureDtype::F16);
  EXPECT_TRUE(i.k_after_rope);
  EXPECT_FALSE(i.has_k_pre_rope);
  EXPECT_EQ(i.model, "synthetic:llama3-8b");
  EXPECT_NE(i.source.find("seed 0"), std::string::npos) << i.source;
  const SyntheticDumpParams l2 = synthetic_preset("llama2-7b");
  EXPECT_EQ(l2.kv_heads, 32);
  EXPECT_EQ(l2.rope_theta, 10000.0);
  const SyntheticDumpParams qw = synthetic_preset("qwen3-8b");
  EXPECT_EQ(qw.layers, 36);
  EXPECT_EQ(qw.rope_theta, 1000000.0);
  // One llama3-8b-shaped head at a long context without touching the others.
  SyntheticDumpParams p = synthetic_preset("llama3-8b");
  p.tokens = 20000;
  const Tensor h = SyntheticDump(p).read_head(31, Role::Q, 31);
  EXPECT_EQ(h.shape, (std::vector<int64_t>{1, 20000, 128}));
  const SyntheticDump t(tiny());
  EXPECT_EQ(t.read(1, Role::Q).shape, (std::vector<int64_t>{4, 256, 16}));
  EXPECT_EQ(t.read(1, Role::V).shape, (std::vector<int64_t>{2, 256, 16}));
  const LayerKV kv = t.read_layer(0);
  EXPECT_EQ(kv.k_pre_rope.shape, (std::vector<int64_t>{2, 256, 16}));
}

TEST(SyntheticDump, ValuesAreFiniteAndFp16Representable) {
  const SyntheticDump d(tiny(9));
  for (int64_t l = 0; l < d.info().num_layers; ++l)
    for (Role r : kRoles)
      for (float x : d.read(l, r).data) {
        ASSERT_TRUE(std::isfinite(x));
        ASSERT_EQ(x, round_to_half(x)) << to_string(r);
      }
}

// The designated outlier channels are the largest by mean |k| over the sequence (post-RoPE),
// stay large in every stretch of tokens (pre-RoPE per channel, post-RoPE per rotated pair),
// and stand far above the median channel.
void check_outliers(const SyntheticDump& d, int64_t layers) {
  const int64_t T = d.info().tokens, D = d.info().head_dim, stretches = 4;
  for (int64_t l = 0; l < layers; ++l) {
    const Tensor k = d.read(l, Role::K), pre = d.read(l, Role::KPreRope);
    for (int64_t g = 0; g < d.info().num_kv_heads; ++g) {
      const std::vector<int64_t> out = d.outlier_channels(l, g);
      ASSERT_FALSE(out.empty());
      ASSERT_LE(out.size(), (size_t)std::max<int64_t>(2, D / 16));
      const std::vector<double> m = mean_abs(k, g, 0, T);
      EXPECT_EQ(top_channels(m, out.size()), out) << "layer " << l << " head " << g;
      for (int64_t c : out) EXPECT_GT(m[c], 3 * median(m)) << "layer " << l << " head " << g << " ch " << c;
      for (int64_t s = 0; s < stretches; ++s) {
        const int64_t t0 = s * T / stretches, t1 = (s + 1) * T / stretches;
        const std::vector<double> mp = mean_abs(pre, g, t0, t1);
        for (int64_t c : out)
          EXPECT_GT(mp[c], 4 * median(mp)) << "pre-RoPE layer " << l << " head " << g << " ch " << c;
        std::vector<double> pair_norm(D / 2, 0.0);  // rotation-invariant: sqrt(x_2j^2 + x_2j+1^2)
        for (int64_t t = t0; t < t1; ++t)
          for (int64_t j = 0; j < D / 2; ++j) {
            const float* row = k.data.data() + (g * T + t) * D;
            pair_norm[j] += std::hypot(row[2 * j], row[2 * j + 1]) / (double)(t1 - t0);
          }
        for (size_t i = 0; i < out.size(); i += 2)
          EXPECT_GT(pair_norm[out[i] / 2], 4 * median(pair_norm))
              << "layer " << l << " head " << g << " pair " << out[i] / 2;
      }
    }
  }
}

TEST(SyntheticDump, OutlierKeyChannelsAreLargestAndStable) {
  for (uint64_t seed : {0, 1, 2}) check_outliers(SyntheticDump(tiny(seed)), 2);
  SyntheticDumpParams p = synthetic_preset("llama3-8b");
  p.tokens = 1024;
  p.k_pre_rope = true;
  check_outliers(SyntheticDump(p), 2);
}

TEST(SyntheticDump, ValuesHaveNoOutlierChannels) {
  SyntheticDumpParams p = synthetic_preset("llama3-8b");
  p.tokens = 512;
  p.layers = 2;
  const SyntheticDump d(p);
  for (int64_t l = 0; l < 2; ++l) {
    const Tensor v = d.read(l, Role::V), k = d.read(l, Role::K);
    for (int64_t g = 0; g < p.kv_heads; ++g) {
      const std::vector<double> mv = mean_abs(v, g, 0, p.tokens), mk = mean_abs(k, g, 0, p.tokens);
      EXPECT_LT(*std::max_element(mv.begin(), mv.end()), 2.0 * median(mv)) << "layer " << l << " head " << g;
      EXPECT_GT(*std::max_element(mk.begin(), mk.end()), 4.0 * median(mk));  // the contrast is real
    }
  }
}

// k = fp16(RoPE(k_pre_rope)) as synthetic_dump.h defines it, recomputed here independently.
void check_rope(RopeStyle style) {
  SyntheticDumpParams p = tiny(11, 300);
  p.rope_style = style;
  const SyntheticDump d(p);
  const int64_t T = p.tokens, D = p.head_dim;
  for (int64_t l = 0; l < p.layers; ++l) {
    const Tensor k = d.read(l, Role::K), pre = d.read(l, Role::KPreRope);
    for (int64_t g = 0; g < p.kv_heads; ++g)
      for (int64_t t = 0; t < T; ++t)
        for (int64_t j = 0; j < D / 2; ++j) {
          const int64_t a = style == RopeStyle::Halves ? j : 2 * j,
                        b = style == RopeStyle::Halves ? j + D / 2 : 2 * j + 1;
          const double w = std::pow(p.rope_theta, -(double)(2 * j) / (double)D);
          const float c = (float)std::cos((double)t * w), s = (float)std::sin((double)t * w);
          const float* x = pre.data.data() + (g * T + t) * D;
          const float* y = k.data.data() + (g * T + t) * D;
          const float ca = c * x[a], sb = s * x[b], sa = s * x[a], cb = c * x[b];
          ASSERT_EQ(y[a], round_to_half(ca - sb)) << to_string(style) << " t " << t << " pair " << j;
          ASSERT_EQ(y[b], round_to_half(sa + cb)) << to_string(style) << " t " << t << " pair " << j;
        }
  }
}

TEST(SyntheticDump, KeysAreRopeOfPreRopeKeys) {
  check_rope(RopeStyle::Adjacent);
  check_rope(RopeStyle::Halves);
  SyntheticDumpParams p = tiny(12);
  p.rope_style = RopeStyle::None;
  const SyntheticDump d(p);
  EXPECT_TRUE(same_bytes(d.read(0, Role::K), d.read(0, Role::KPreRope)));
}

// Causal softmax(q.k / sqrt(D)) for queries t in [T/2, T): the mean weight on token 0, the mean
// uniform weight 1/(t+1), and the mean entropy against ln(t+1).
struct AttentionStats {
  double sink = 0, uniform = 0, entropy = 0, max_entropy = 0;
};

AttentionStats attention(const SyntheticDump& d) {
  const DumpInfo& in = d.info();
  const int64_t T = in.tokens, D = in.head_dim, group = in.num_q_heads / in.num_kv_heads;
  AttentionStats st;
  int64_t n = 0;
  for (int64_t l = 0; l < in.num_layers; ++l) {
    const Tensor q = d.read(l, Role::Q), k = d.read(l, Role::K);
    for (int64_t h = 0; h < in.num_q_heads; ++h)
      for (int64_t t = T / 2; t < T; t += 4) {
        std::vector<double> s(t + 1);
        for (int64_t j = 0; j <= t; ++j) {
          double a = 0;
          for (int64_t c = 0; c < D; ++c)
            a += (double)q.data[(h * T + t) * D + c] * k.data[((h / group) * T + j) * D + c];
          s[j] = a / std::sqrt((double)D);
        }
        const double mx = *std::max_element(s.begin(), s.end());
        double z = 0, e = 0;
        for (double& x : s) z += (x = std::exp(x - mx));
        for (double x : s)
          if (x > 0) e -= x / z * std::log(x / z);
        st.sink += s[0] / z;
        st.uniform += 1.0 / (t + 1);
        st.entropy += e;
        st.max_entropy += std::log(t + 1.0);
        ++n;
      }
  }
  st.sink /= n;
  st.uniform /= n;
  st.entropy /= n;
  st.max_entropy /= n;
  return st;
}

TEST(SyntheticDump, SinkTokenDrawsAttentionAndAttentionIsNotUniform) {
  for (uint64_t seed : {0, 1, 2}) {
    SyntheticDumpParams p = tiny(seed);
    const AttentionStats with = attention(SyntheticDump(p));
    p.sink_tokens = 0;
    const AttentionStats without = attention(SyntheticDump(p));
    EXPECT_GT(with.sink, 10 * with.uniform) << "seed " << seed;
    EXPECT_GT(with.sink, 5 * without.sink) << "seed " << seed;  // the sink shape causes it
    EXPECT_LT(with.entropy, with.max_entropy - 1.5) << "seed " << seed;
    EXPECT_LT(without.entropy, without.max_entropy - 1.0) << "seed " << seed;
  }
}

TEST(SyntheticDump, BadParametersAreNamed) {
  auto fails = [](SyntheticDumpParams p, const std::string& needle) {
    try {
      SyntheticDump d(p);
      ADD_FAILURE() << "no error for " << needle;
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  SyntheticDumpParams p = tiny();
  p.tokens = 0;
  fails(p, "tokens must be positive");
  p = tiny();
  p.q_heads = 6;
  p.kv_heads = 4;
  fails(p, "not a multiple of num_kv_heads");
  p = tiny();
  p.head_dim = 15;
  fails(p, "even head_dim");
  p = tiny();
  p.layers = -1;
  fails(p, "num_layers");
  p = tiny();
  p.sink_tokens = -2;
  fails(p, "sink_tokens");
  p = tiny();
  p.rope_theta = 0;
  fails(p, "rope_theta");
  p = tiny();
  p.head_dim = 15;
  p.rope_style = RopeStyle::None;  // odd is fine without RoPE
  EXPECT_EQ(SyntheticDump(p).read(0, Role::V).shape, (std::vector<int64_t>{2, 256, 15}));
  try {
    synthetic_preset("llama9");
    ADD_FAILURE();
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("llama3-8b"), std::string::npos) << e.what();
  }
  p = tiny();
  p.k_pre_rope = false;
  const SyntheticDump d(p);
  EXPECT_THROW(d.read(0, Role::KPreRope), std::runtime_error);
  EXPECT_THROW(d.read(2, Role::Q), std::out_of_range);
  EXPECT_THROW(d.read_head(0, Role::K, 2), std::out_of_range);
  std::vector<float> buf(1);
  EXPECT_THROW(d.generate(0, Role::Q, 2, 2, buf.data()), std::invalid_argument);
}

// Written through DumpWriter and read back through open_dump: the same bytes and metadata.
TEST(SyntheticDump, RoundTripsThroughTheDumpFormat) {
  const SyntheticDump gen(tiny(13, 200));
  const std::string path = ::testing::TempDir() + "synthetic_dump_test.h5";
  {
    DumpWriter w(path, gen.info());
    for (int64_t l = 0; l < gen.info().num_layers; ++l)
      for (Role r : kRoles) {
        const Tensor x = gen.read(l, r);
        w.write(l, r, x.view());
      }
    w.commit();
  }
  const auto back = open_dump(path);
  EXPECT_EQ(back->info().model, "synthetic:tiny");
  EXPECT_EQ(back->info().dtype, CaptureDtype::F16);
  EXPECT_EQ(back->info().source, gen.info().source);
  EXPECT_TRUE(back->info().has_k_pre_rope);
  for (int64_t l = 0; l < gen.info().num_layers; ++l)
    for (Role r : kRoles)
      EXPECT_TRUE(same_bytes(back->read(l, r), gen.read(l, r))) << l << " " << to_string(r);
  std::remove(path.c_str());
}

// The portable Gaussian: moments and tails of a standard normal; the helpers agree with libm.
TEST(SyntheticRng, GaussianMomentsAndHelpers) {
  const int64_t n = 1 << 22;
  std::vector<float> z(n);
  synth::fill_gauss(synth::stream_key(1, 2, 3), z.data(), n);
  double m1 = 0, m2 = 0, m4 = 0, tail = 0;
  for (float x : z) {
    m1 += x;
    m2 += (double)x * x;
    m4 += (double)x * x * x * x;
    tail += std::fabs(x) > 2;
  }
  m1 /= n;
  m2 /= n;
  m4 /= n;
  tail /= n;
  EXPECT_NEAR(m1, 0.0, 0.003);
  EXPECT_NEAR(m2, 1.0, 0.005);
  EXPECT_NEAR(m4, 3.0, 0.05);
  EXPECT_NEAR(tail, 0.0455, 0.001);
  // The extreme hashes (u1 at its ends, every angle quadrant) give finite values.
  for (uint64_t h : {0ull, ~0ull, 0xffffff0000000000ull, 0x000000ffffffffffull, 0xfffffe0000c00000ull}) {
    float a = NAN, b = NAN;
    synth::gauss_pair(h, a, b);
    EXPECT_TRUE(std::isfinite(a) && std::isfinite(b) && std::fabs(a) < 6 && std::fabs(b) < 6)
        << std::hex << h;
  }
  for (float u = 1e-7f; u < 1.0f; u *= 1.37f) {
    EXPECT_NEAR(synth::portable_log(u), std::log(u), 2e-6 * std::fabs(std::log(u)) + 1e-7) << u;
    const float y = -2.0f * std::log(u);
    EXPECT_NEAR(synth::portable_sqrt(y), std::sqrt(y), 2e-7 * std::sqrt(y)) << y;
  }
  for (float x = -2.0f; x <= 2.0f; x += 0.01f)
    EXPECT_NEAR(synth::portable_exp_small(x), std::exp(x), 1e-6 * std::exp(x));
}

}  // namespace
}  // namespace kvlab
