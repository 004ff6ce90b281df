// The kvquant family: hand-checked levels, keys, values and bits, the registry, RoPE after
// dequantization, calibration from another dump, the decode rule, and eval's clear error without
// k_pre_rope.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include <unistd.h>

#include "../core/decode_check.h"
#include "kvlab/decode_view.h"
#include "kvlab/dump.h"
#include "kvlab/evaluate.h"
#include "kvlab/kvquant.h"
#include "kvlab/method.h"
#include "kvlab/synthetic_dump.h"
#include "kvlab/vq_method.h"

namespace {

using namespace kvlab;

TEST(Kvquant, OutlierCountAndBits) {
  EXPECT_EQ(kvquant_outlier_count(0.0, 128), 0);
  EXPECT_EQ(kvquant_outlier_count(0.01, 128), 1);  // 1.28
  EXPECT_EQ(kvquant_outlier_count(0.02, 128), 3);  // 2.56
  // 3 + 8 levels x 16 bits / 1024 tokens + 1 x (16 + 7) / 128
  EXPECT_DOUBLE_EQ(kvquant_key_bits(3, 1, 1024, 128), 3.0 + 0.125 + 23.0 / 128);
  EXPECT_DOUBLE_EQ(kvquant_value_bits(3, 1, 128), 3.0 + 0.25 + 23.0 / 128);
  EXPECT_DOUBLE_EQ(kvquant_value_bits(2, 0, 8), 2.0 + 4.0);
}

TEST(Kvquant, LevelsAreKMeansCentroidsInFp16) {
  // One channel, two clusters; share 0.25 drops one value at each end (0 and 11).
  const float x[8] = {11, 0, 1, 10, 0, 1, 10, 11};
  const std::vector<float> all = kvquant_train_levels(x, 8, 1, 1, 0.0);
  EXPECT_EQ(all, (std::vector<float>{0.5f, 10.5f}));
  const std::vector<float> cut = kvquant_train_levels(x, 8, 1, 1, 0.25);
  // means {0, 1, 1} = 2/3 and {10, 10, 11} = 31/3, rounded to fp16 (spacing 2^-11 and 2^-7)
  EXPECT_EQ(cut, (std::vector<float>{1365.0f / 2048, 1323.0f / 128}));
  EXPECT_THROW(kvquant_train_levels(x, 8, 1, 3, 0.25), std::invalid_argument);  // 6 values, 8 levels
}

TEST(Kvquant, KeysNearestLevelThenWorstServedKeptInFp16) {
  const std::vector<float> levels = {0, 1, -2, 2};  // channel 0: {0, 1}; channel 1: {-2, 2}
  const float x[6] = {0.5f, 1.0f, 0.9f, -3.0f, 2.0f, 0.0f};
  float dense[6], sparse[6];
  kvquant_keys(x, 3, 2, levels, 1, 0, dense);
  // 0.5 ties to the lower level 0; 0.0 in channel 1 ties to -2
  EXPECT_EQ(std::vector<float>(dense, dense + 6), (std::vector<float>{0, 2, 1, -2, 1, -2}));
  kvquant_keys(x, 3, 2, levels, 1, 1, sparse);
  // errors (0.5, 1), (0.1, 1), (1, 2): channel 1 of every token is kept
  EXPECT_EQ(std::vector<float>(sparse, sparse + 6), (std::vector<float>{0, 1, 1, -3, 1, 0}));
  EXPECT_THROW(kvquant_keys(x, 3, 2, levels, 2, 0, dense), std::invalid_argument);
}

TEST(Kvquant, ValuesPerTokenWithLargestKept) {
  const float x[8] = {0.0f, 0.3f, 0.9f, -5.0f, 1.0f, -1.0f, 0.5f, 0.0f};
  float out[8];
  kvquant_values(x, 2, 4, 2, 1, out);
  // token 0: -5 kept; scale fp16(0.9 / 3) = 1229 x 2^-12, zero 0, codes 0, 1, 3
  const float s = 1229.0f / 4096;
  EXPECT_EQ(out[0], 0.0f);
  EXPECT_EQ(out[1], s);
  EXPECT_EQ(out[2], 3 * s);
  EXPECT_EQ(out[3], -5.0f);
  // token 1: |1| ties |-1|, the lower channel is kept; scale 0.5, zero -1: codes 0, 3, 2
  EXPECT_EQ(std::vector<float>(out + 4, out + 8), (std::vector<float>{1.0f, -1.0f, 0.5f, 0.0f}));
}

// The RoPE applied after dequantization is the runner's: on the shipped llama2.c dump (written
// by kvlab's runner) it turns k_pre_rope into k bit for bit.
TEST(Kvquant, RopeIsTheRunnersBitForBit) {
  const std::unique_ptr<DumpReader> d = open_dump(default_dump_path());
  const DumpInfo& i = d->info();
  ASSERT_TRUE(i.has_k_pre_rope);
  for (int64_t l = 0; l < i.num_layers; ++l) {
    Tensor pre = d->read(l, Role::KPreRope);
    const Tensor k = d->read(l, Role::K);
    for (int64_t h = 0; h < i.num_kv_heads; ++h)
      apply_rope(&pre.data[h * i.tokens * i.head_dim], i.tokens, i.head_dim, i.rope_style,
                 (float)i.rope_theta);
    EXPECT_EQ(pre.data, k.data) << "layer " << l;
  }
}

TEST(Kvquant, RegistrySpecScheduleAndBits) {
  register_vq_method();
  const MethodPtr m = parse_method("kvquant-3");
  EXPECT_EQ(m->spec(), "kvquant:kbits=3,vbits=3,outliers=0.01,calib=half");
  EXPECT_TRUE(*parse_method(m->spec()) == *m);
  EXPECT_TRUE(m->needs_k_pre_rope());
  const Schedule s = m->schedule(100);
  EXPECT_EQ(s.key_begin, 50);
  EXPECT_EQ(s.value_end, 100);
  EXPECT_EQ(parse_method("kvquant:bits=2,calib=first:10")->schedule(100).key_begin, 10);
  EXPECT_DOUBLE_EQ(m->bits(1024, 128).key, kvquant_key_bits(3, 1, 1024, 128));
  EXPECT_DOUBLE_EQ(m->bits(1024, 128).value, kvquant_value_bits(3, 1, 128));
  for (const char* bad : {"kvquant:kbits=9", "kvquant:outliers=0.5", "kvquant:calib=nope",
                          "kvquant:calib=first:0", "kvquant:calib=dump:/nonexistent.h5"})
    EXPECT_ANY_THROW(parse_method(bad)) << bad;
}

// A tiny synthetic model (D 16, RoPE adjacent) with keys before RoPE.
SyntheticDumpParams tiny(uint64_t seed) {
  SyntheticDumpParams p = synthetic_preset("tiny");
  p.k_pre_rope = true;
  p.seed = seed;
  return p;
}

double rel_err(const std::vector<float>& a, const Tensor& ref) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i)
    num += std::pow(a[i] - ref.data[i], 2), den += std::pow(ref.data[i], 2);
  return std::sqrt(num / den);
}

TEST(Kvquant, RopeAfterDequantizationMatchesPostRopeKeys) {
  register_vq_method();
  const SyntheticDump d(tiny(3));
  const DumpInfo& i = d.info();
  const Tensor k = d.read_head(1, Role::K, 1), v = d.read_head(1, Role::V, 1),
               pre = d.read_head(1, Role::KPreRope, 1);
  const HeadContext at{1, 1, pre.view(), i.rope_style, (float)i.rope_theta};
  const Reconstruction r8 = parse_method("kvquant:bits=6,outliers=0")->apply(k.view(), v.view(), at);
  const Reconstruction r2 = parse_method("kvquant:bits=2,outliers=0.125")->apply(k.view(), v.view(), at);
  EXPECT_LT(rel_err(r8.k.data, k), 0.05);   // 64 levels per channel, rotated like k
  EXPECT_GT(rel_err(r8.k.data, pre), 0.1);  // ... and not left before RoPE
  EXPECT_LT(rel_err(r8.v.data, v), 0.05);
  EXPECT_GT(rel_err(r2.k.data, k), rel_err(r8.k.data, k));
  EXPECT_LT(rel_err(r2.k.data, k), 0.5);
  try {
    parse_method("kvquant-3")->apply(k.view(), v.view(), {1, 1});
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("k_pre_rope"), std::string::npos) << e.what();
  }
}

// A synthetic dump written to a file, keys before RoPE included. The name carries the process id:
// ctest runs this binary's tests as parallel processes, which must not write the same file.
std::string dump_file(uint64_t seed) {
  std::string path = testing::TempDir();
  path.append("kvquant_calib_" + std::to_string(seed) + "_" + std::to_string(::getpid()) + ".h5");
  const SyntheticDump src(tiny(seed));
  DumpWriter w(path, src.info());
  for (int64_t l = 0; l < src.info().num_layers; ++l)
    for (Role r : {Role::Q, Role::K, Role::V, Role::KPreRope}) w.write(l, r, src.read(l, r).view());
  w.commit();
  return path;
}

TEST(Kvquant, CalibratesOnAnotherDump) {
  register_vq_method();
  const std::string same = dump_file(3), other = dump_file(7);
  const MethodPtr m = parse_method("kvquant:bits=4,calib=dump:" + same);
  EXPECT_TRUE(*parse_method(m->spec()) == *m);
  EXPECT_EQ(m->files(), std::vector<std::string>{same});
  EXPECT_EQ(m->schedule(256).key_begin, 0);  // every token evaluated
  EXPECT_NE(m->calibration().find(same), std::string::npos);
  EXPECT_NO_THROW(m->check_model({2, 2, 16}));
  EXPECT_THROW(m->check_model({2, 2, 32}), std::invalid_argument);
  const SyntheticDump d(tiny(3));
  const Tensor k = d.read_head(0, Role::K, 0), v = d.read_head(0, Role::V, 0),
               pre = d.read_head(0, Role::KPreRope, 0);
  const HeadContext at{0, 0, pre.view(), d.info().rope_style, (float)d.info().rope_theta};
  const Reconstruction in_sample = m->apply(k.view(), v.view(), at);
  const Reconstruction elsewhere =
      parse_method("kvquant:bits=4,calib=dump:" + other)->apply(k.view(), v.view(), at);
  EXPECT_LT(rel_err(in_sample.k.data, k), 0.2);
  // the levels come from the named dump: another model's levels serve these keys worse
  EXPECT_GT(rel_err(elsewhere.k.data, k), rel_err(in_sample.k.data, k));
  EXPECT_EQ(in_sample.v.data, elsewhere.v.data);  // values learn nothing
}

// The first n tokens of a (1, T, D) head.
Tensor first_tokens(const Tensor& x, int64_t n) {
  const int64_t D = x.shape[2];
  return {{1, n, D}, std::vector<float>(x.data.begin(), x.data.begin() + n * D)};
}

// Decoding (docs/FORMATS.md section 12): keys (against levels that exist before the token) and
// values are quantized per token, so each token is quantized as it arrives; every step against
// its own prefix, bit for bit, for levels from another dump and from the first N tokens.
TEST(Kvquant, DecodeRuleMatchesEachStepsPrefix) {
  register_vq_method();
  const std::string calib = dump_file(7);
  const SyntheticDump d(tiny(3));
  const DumpInfo& i = d.info();
  for (const std::string spec :
       {"kvquant:bits=2,calib=dump:" + calib, std::string("kvquant:bits=2,calib=first:12"),
        "kvquant:kbits=3,vbits=2,outliers=0.125,calib=dump:" + calib}) {
    SCOPED_TRACE(spec);
    const MethodPtr m = parse_method(spec);
    for (int64_t h = 0; h < i.num_kv_heads; ++h) {
      const Tensor k = first_tokens(d.read_head(1, Role::K, h), 40),
                   v = first_tokens(d.read_head(1, Role::V, h), 40),
                   pre = first_tokens(d.read_head(1, Role::KPreRope, h), 40);
      kvtest::check_streaming(*m, k, v, {1, h, pre.view(), i.rope_style, (float)i.rope_theta});
    }
  }
}

// Hand-checked: levels from another dump exist from the start (every token quantized as it
// arrives); levels from the first 3 tokens: fp16 until the 3rd, everything from the 4th on (the
// calibration tokens too, with the levels they gave); calib=half is refused, naming what to use.
TEST(Kvquant, DecodeScheduleHandChecked) {
  register_vq_method();
  const MethodPtr dump = parse_method("kvquant:bits=2,calib=dump:" + dump_file(7)),
                  first = parse_method("kvquant:bits=2,calib=first:3");
  const std::vector<std::string> first_marks = {"f", "ff", "fff", "qqqq", "qqqqq"};
  for (int64_t t = 0; t < 5; ++t) {
    const Schedule a = dump->decode_schedule(t + 1), b = first->decode_schedule(t + 1);
    EXPECT_EQ(kvtest::marks(a.key_begin, a.key_end, t), std::string(t + 1, 'q')) << "dump keys, step " << t;
    EXPECT_EQ(kvtest::marks(a.value_begin, a.value_end, t), std::string(t + 1, 'q'))
        << "dump values, step " << t;
    EXPECT_EQ(kvtest::marks(b.key_begin, b.key_end, t), first_marks[t]) << "first:3 keys, step " << t;
    EXPECT_EQ(kvtest::marks(b.value_begin, b.value_end, t), first_marks[t]) << "first:3 values, step " << t;
    EXPECT_EQ(first->decode_apply_tokens(t + 1), t < 3 ? 0 : t + 1);
  }
  try {
    check_decodable(*parse_method("kvquant-3"));
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("calib=half"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("calib=dump:PATH"), std::string::npos) << e.what();
  }
}

// The levels trained from a calibration dump are kept per (layer, KV head): the order in which
// heads are rebuilt does not change any head's bytes.
TEST(Kvquant, DumpLevelsKeptPerHead) {
  register_vq_method();
  const std::string calib = dump_file(7), spec = "kvquant:bits=3,calib=dump:" + calib;
  const SyntheticDump d(tiny(3));
  const DumpInfo& i = d.info();
  auto rebuild = [&](const MethodPtr& m, int64_t l, int64_t h) {
    const Tensor k = d.read_head(l, Role::K, h), v = d.read_head(l, Role::V, h),
                 pre = d.read_head(l, Role::KPreRope, h);
    return m->apply(k.view(), v.view(), {l, h, pre.view(), i.rope_style, (float)i.rope_theta}).k.data;
  };
  const MethodPtr a = parse_method(spec), b = parse_method(spec);
  const std::vector<float> a01 = rebuild(a, 0, 1), a10 = rebuild(a, 1, 0), a01_again = rebuild(a, 0, 1);
  const std::vector<float> b10 = rebuild(b, 1, 0), b01 = rebuild(b, 0, 1);
  EXPECT_EQ(a01, b01);
  EXPECT_EQ(a10, b10);
  EXPECT_EQ(a01, a01_again);
}

TEST(Kvquant, EvalNamesTheCaptureWithoutKPreRope) {
  register_vq_method();
  const SyntheticDump d(synthetic_preset("tiny"));  // no k_pre_rope
  const DumpInfo& i = d.info();
  const EvalShape shape{i.num_layers, i.num_q_heads, i.num_kv_heads,      i.head_dim,
                        i.tokens,     i.rope_style,  (float)i.rope_theta, i.has_k_pre_rope};
  EvalOptions o;
  o.methods = {"kvquant-3"};
  EXPECT_TRUE(eval_needs_k_pre_rope(o.methods));
  EXPECT_FALSE(eval_needs_k_pre_rope({"kivi-2", "nope"}));
  try {
    evaluate(
        shape,
        [&](int64_t l) {
          return LayerQKV{d.read(l, Role::Q), d.read(l, Role::K), d.read(l, Role::V)};
        },
        o);
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("kvlab dump"), std::string::npos) << e.what();
  }
  // With k_pre_rope: eval runs and evaluates the second half.
  const SyntheticDump p(tiny(3));
  EvalShape sp = shape;
  sp.has_k_pre_rope = true;
  const EvalResult r = evaluate(
      sp,
      [&](int64_t l) {
        LayerQKV x{p.read(l, Role::Q), p.read(l, Role::K), p.read(l, Role::V)};
        x.k_pre_rope = p.read(l, Role::KPreRope);
        return x;
      },
      o);
  EXPECT_EQ(r.methods[0].schedule.key_begin, 128);
  EXPECT_GT(r.methods[0].attn.score_count, 0);
}

}  // namespace
