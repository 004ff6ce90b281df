// The evaluation driver: agreement with the building blocks and the oracle (also on the
// built-in stories260K dump), aggregation rules, fp16 exactness, streaming, determinism, and
// every bad-input error.
#include <gtest/gtest.h>

#include <filesystem>
#include <functional>

#include "eval_oracle.h"
#include "kvlab/attention.h"
#include "kvlab/dump.h"
#include "kvlab/evaluate.h"

namespace {

using kvlab::AttnStats;
using kvlab::EvalOptions;
using kvlab::EvalResult;
using kvlab::EvalShape;
using kvlab::LayerQKV;
using kvlab::Tensor;

// A small dump in memory; fp16-representable when `half` (as a dump captured in fp16 is).
struct Fake {
  EvalShape shape;
  std::vector<LayerQKV> layers;
  std::vector<int64_t> loaded;  // layers the loader was asked for, in order

  Fake(int64_t L, int64_t Hq, int64_t Hkv, int64_t T, int64_t D, bool half, uint32_t seed = 1)
      : shape{L, Hq, Hkv, D, T} {
    for (int64_t l = 0; l < L; ++l) {
      LayerQKV x{evtest::normal({Hq, T, D}, seed + 3 * l, 0.5f), evtest::keys({Hkv, T, D}, seed + 3 * l + 1),
                 evtest::normal({Hkv, T, D}, seed + 3 * l + 2)};
      if (half)
        for (auto* t : {&x.q, &x.k, &x.v})
          for (auto& v : t->data) v = (float)(_Float16)v;
      layers.push_back(std::move(x));
    }
  }
  kvlab::LayerLoader loader() {
    return [this](int64_t l) {
      loaded.push_back(l);
      return layers.at(l);
    };
  }
};

EvalOptions options(std::vector<std::string> methods, const char* queries = "all") {
  EvalOptions o;
  o.methods = std::move(methods);
  o.queries = kvlab::parse_queries(queries);
  return o;
}

TEST(Evaluate, AgreesWithWholeTensorMethodsAndAttentionErrors) {
  Fake f(2, 4, 2, 300, 32, false);
  const std::vector<std::string> names = {"int8", "kivi-2", "kitty:group=64,sink=8,residual=64"};
  const EvalResult r = kvlab::evaluate(f.shape, f.loader(), options(names, "stride:7"));
  ASSERT_EQ(r.methods.size(), names.size());
  const auto pos = kvlab::select_queries(kvlab::parse_queries("stride:7"), 300);
  EXPECT_EQ(r.num_queries, (int64_t)pos.size());
  for (int64_t l = 0; l < 2; ++l) {
    const auto& x = f.layers[l];
    std::vector<kvlab::Reconstruction> caches;
    for (const auto& n : names) caches.push_back(kvlab::parse_method(n)->apply(x.k.view(), x.v.view()));
    const auto want = kvlab::attention_errors(x.q.view(), x.k.view(), x.v.view(), caches, pos);
    for (size_t m = 0; m < names.size(); ++m) {
      const auto& le = r.methods[m].layers[l];
      EXPECT_EQ(le.layer, l);
      // Methods applied per KV head give the bytes of the whole tensor, and the same kernel runs:
      // identical sums.
      for (int64_t h = 0; h < 4; ++h) {
        EXPECT_EQ(le.attn[h].score_sq_err, want[m][h].score_sq_err) << names[m];
        EXPECT_EQ(le.attn[h].kl_sum, want[m][h].kl_sum) << names[m];
        EXPECT_EQ(le.attn[h].out_sq_err, want[m][h].out_sq_err) << names[m];
        EXPECT_EQ(le.attn[h].topk_sum, want[m][h].topk_sum) << names[m];
      }
      // Reconstruction error over the schedule's quantized positions, head by head.
      const kvlab::Schedule sc = kvlab::parse_method(names[m])->schedule(300);
      for (int64_t g = 0; g < 2; ++g) {
        double se = 0, mx = 0;
        for (int64_t t = sc.key_begin; t < sc.key_end; ++t)
          for (int64_t c = 0; c < 32; ++c) {
            const double d =
                (double)x.k.data[(g * 300 + t) * 32 + c] - caches[m].k.data[(g * 300 + t) * 32 + c];
            se += d * d;
            mx = std::max(mx, std::fabs(d));
          }
        EXPECT_EQ(le.key[g].count, (sc.key_end - sc.key_begin) * 32);
        EXPECT_NEAR(le.key[g].sq_err, se, 1e-12 * se) << names[m];
        EXPECT_EQ(le.key[g].max_abs, mx) << names[m];
        EXPECT_EQ(le.value[g].count, (sc.value_end - sc.value_begin) * 32);
      }
    }
  }
}

TEST(Evaluate, HalfDumpTakesFp16ViewsWithTheSameResults) {
  // A dump of fp16 values is handed to core as fp16 views; every preset must give the sums of
  // the fp32 path (the methods' apply on fp32 tensors, then the same kernel).
  Fake f(1, 4, 2, 300, 32, true);
  const EvalResult r = kvlab::evaluate(f.shape, f.loader(), options({}, "last:40"));
  const auto& x = f.layers[0];
  const auto pos = kvlab::select_queries(kvlab::parse_queries("last:40"), 300);
  for (const auto& m : r.methods) {
    const auto c = m.method->apply(x.k.view(), x.v.view());
    const auto want = kvlab::attention_errors(x.q.view(), x.k.view(), x.v.view(), {c}, pos);
    for (int64_t h = 0; h < 4; ++h) {
      EXPECT_EQ(m.layers[0].attn[h].score_sq_err, want[0][h].score_sq_err) << m.name;
      EXPECT_EQ(m.layers[0].attn[h].kl_sum, want[0][h].kl_sum) << m.name;
      EXPECT_EQ(m.layers[0].attn[h].out_sq_err, want[0][h].out_sq_err) << m.name;
    }
  }
}

TEST(Evaluate, AggregatesAsDocumented) {
  Fake f(3, 4, 2, 200, 16, false);
  const EvalResult r = kvlab::evaluate(f.shape, f.loader(), options({"kivi-4"}, "last:50"));
  const auto& m = r.methods[0];
  EXPECT_EQ(m.spec, kvlab::parse_method("kivi-4")->spec());
  const auto bits = kvlab::parse_method("kivi-4")->bits(200, 16);
  EXPECT_EQ(m.bits.key, bits.key);
  EXPECT_EQ(m.bits.value, bits.value);
  double se = 0, err = 0, ref = 0, kl = 0, kse = 0;
  int64_t count = 0, queries = 0, kcount = 0;
  for (const auto& le : m.layers) {
    for (const auto& a : le.attn) {
      se += a.score_sq_err;
      count += a.score_count;
      err += a.out_sq_err;
      ref += a.out_sq_ref;
      kl += a.kl_sum;
      queries += a.queries;
    }
    for (const auto& k : le.key) {
      kse += k.sq_err;
      kcount += k.count;
    }
  }
  EXPECT_EQ(queries, 3 * 4 * 50);
  EXPECT_EQ(count, 3 * 4 * (151 + 200) * 50 / 2);                // positions 150..199 see t + 1 keys
  EXPECT_DOUBLE_EQ(m.attn.score_mse(), se / count);              // mean over all valid entries
  EXPECT_DOUBLE_EQ(m.attn.out_rel_err(), std::sqrt(err / ref));  // pooled over heads and layers
  EXPECT_DOUBLE_EQ(m.attn.kl(), kl / queries);                   // mean over all queries
  EXPECT_DOUBLE_EQ(m.key.mse(), kse / kcount);                   // mean over quantized elements
}

TEST(Evaluate, Fp16OnHalfDumpIsExactlyZeroAndFp32DumpIsNearlyZero) {
  Fake half(2, 4, 2, 150, 16, true), full(2, 4, 2, 150, 16, false);
  const EvalResult a = kvlab::evaluate(half.shape, half.loader(), options({"fp16", "int8"}));
  const EvalResult b = kvlab::evaluate(full.shape, full.loader(), options({"fp16"}));
  const auto& z = a.methods[0];
  EXPECT_EQ(z.key.count, 0);  // nothing is quantized
  EXPECT_EQ(z.key.mse(), 0.0);
  EXPECT_EQ(z.attn.score_sq_err, 0.0);
  EXPECT_EQ(z.attn.out_sq_err, 0.0);
  EXPECT_EQ(z.attn.kl_sum, 0.0);
  EXPECT_EQ(z.attn.topk_overlap(), 1.0);
  EXPECT_GT(z.attn.out_sq_ref, 0.0);
  EXPECT_EQ(z.attn.out_sq_ref, a.methods[1].attn.out_sq_ref);  // the same reference
  EXPECT_GT(a.methods[1].attn.score_sq_err, 0.0);
  // fp32 values rounded to the fp16 cache: errors of fp16 rounding (2^-11 relative).
  EXPECT_GT(b.methods[0].attn.out_rel_err(), 0.0);
  EXPECT_LT(b.methods[0].attn.out_rel_err(), 1e-3);
  EXPECT_LT(b.methods[0].attn.kl(), 1e-5);
}

TEST(Evaluate, StreamsRequestedLayersInOrderAndReportsProgress) {
  Fake f(5, 2, 1, 64, 8, false);
  EvalOptions o = options({"kivi-2"});
  o.layers = kvlab::parse_layers("1-3");
  std::vector<int64_t> done;
  o.progress = [&](const kvlab::EvalProgress& p) {
    EXPECT_EQ(p.layers_total, 3);
    done.push_back(p.layers_done);
  };
  const EvalResult r = kvlab::evaluate(f.shape, f.loader(), o);
  EXPECT_EQ(f.loaded, (std::vector<int64_t>{1, 2, 3}));
  EXPECT_EQ(done, (std::vector<int64_t>{1, 2, 3}));
  ASSERT_EQ(r.methods[0].layers.size(), 3u);
  EXPECT_EQ(r.methods[0].layers[0].layer, 1);
  EXPECT_EQ(r.layers.first, 1);
  EXPECT_EQ(r.layers.last, 3);
}

TEST(Evaluate, DefaultMethodsAreTheSevenPresets) {
  Fake f(1, 2, 1, 64, 8, false);
  const EvalResult r = kvlab::evaluate(f.shape, f.loader(), {});
  ASSERT_EQ(r.methods.size(), 7u);
  for (size_t i = 0; i < 7; ++i) EXPECT_EQ(r.methods[i].name, kvlab::default_eval_methods()[i]);
}

TEST(Evaluate, SameResultsForAnyThreadCount) {
  Fake f(2, 8, 2, 260, 16, false);
  std::vector<EvalResult> runs;
  for (int n : {1, 2, 3}) {
    EvalOptions o = options({"int8", "kitty"});
    o.threads = n;
    runs.push_back(kvlab::evaluate(f.shape, f.loader(), o));
    EXPECT_EQ(runs.back().threads, n);
  }
  for (size_t i = 1; i < runs.size(); ++i)
    for (size_t m = 0; m < 2; ++m) {
      const auto &a = runs[0].methods[m], &b = runs[i].methods[m];
      EXPECT_EQ(a.attn.score_sq_err, b.attn.score_sq_err);
      EXPECT_EQ(a.attn.kl_sum, b.attn.kl_sum);
      EXPECT_EQ(a.attn.out_sq_err, b.attn.out_sq_err);
      EXPECT_EQ(a.attn.topk_sum, b.attn.topk_sum);
      EXPECT_EQ(a.key.sq_err, b.key.sq_err);
      EXPECT_EQ(a.value.sq_err, b.value.sq_err);
    }
}

// kvlab plan reads no top-8: without it every other sum keeps its bits, per layer and head.
TEST(Evaluate, SkippingTopKChangesNoOtherSum) {
  Fake f(2, 8, 2, 260, 16, false);
  EvalOptions with = options({"int8", "kivi-2", "kitty"}), without = with;
  without.topk = false;
  const EvalResult a = kvlab::evaluate(f.shape, f.loader(), with),
                   b = kvlab::evaluate(f.shape, f.loader(), without);
  for (size_t m = 0; m < a.methods.size(); ++m) {
    EXPECT_GT(a.methods[m].attn.topk_sum, 0.0);
    EXPECT_EQ(b.methods[m].attn.topk_sum, 0.0);
    for (size_t l = 0; l < a.methods[m].layers.size(); ++l)
      for (size_t h = 0; h < a.methods[m].layers[l].attn.size(); ++h) {
        const AttnStats &x = a.methods[m].layers[l].attn[h], &y = b.methods[m].layers[l].attn[h];
        EXPECT_EQ(x.score_sq_err, y.score_sq_err);
        EXPECT_EQ(x.kl_sum, y.kl_sum);
        EXPECT_EQ(x.out_sq_err, y.out_sq_err);
        EXPECT_EQ(x.out_sq_ref, y.out_sq_ref);
        EXPECT_EQ(x.score_count, y.score_count);
        EXPECT_EQ(x.queries, y.queries);
      }
  }
}

// --- bad input --------------------------------------------------------------------------------

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

TEST(EvaluateBadInput, UnknownMethodListsPresets) {
  Fake f(1, 2, 1, 32, 8, false);
  const std::string e = error_of([&] { kvlab::evaluate(f.shape, f.loader(), options({"kivi-3"})); });
  EXPECT_NE(e.find("--methods 'kivi-3'"), std::string::npos) << e;
  for (const char* valid : {"fp16", "int8", "kivi-4", "kivi-2-sink", "kitty-pro", "kivi:key=value"})
    EXPECT_NE(e.find(valid), std::string::npos) << e;
  EXPECT_TRUE(f.loaded.empty());  // rejected before reading anything
}

TEST(EvaluateBadInput, UnknownOrBadParameterNamesIt) {
  Fake f(1, 2, 1, 32, 8, false);
  std::string e = error_of([&] { kvlab::evaluate(f.shape, f.loader(), options({"kivi:kbits=2,bost=0.1"})); });
  EXPECT_NE(e.find("bost"), std::string::npos) << e;
  EXPECT_NE(e.find("residual"), std::string::npos) << e;  // the valid keys are listed
  e = error_of([&] { kvlab::evaluate(f.shape, f.loader(), options({"kitty:boost=2"})); });
  EXPECT_NE(e.find("boost must be in [0, 1]"), std::string::npos) << e;
  EXPECT_TRUE(f.loaded.empty());
}

TEST(EvaluateBadInput, LayersOutOfRange) {
  Fake f(4, 2, 1, 32, 8, false);
  EvalOptions o = options({"int8"});
  o.layers = kvlab::parse_layers("2-4");
  const std::string e = error_of([&] { kvlab::evaluate(f.shape, f.loader(), o); });
  EXPECT_NE(e.find("out of range; the dump has 4 layers (0-3)"), std::string::npos) << e;
  EXPECT_TRUE(f.loaded.empty());
}

TEST(EvaluateBadInput, QueriesLargerThanTokens) {
  Fake f(1, 2, 1, 32, 8, false);
  for (const char* q : {"last:33", "stride:40"}) {
    const std::string e = error_of([&] { kvlab::evaluate(f.shape, f.loader(), options({"int8"}, q)); });
    EXPECT_NE(e.find(q), std::string::npos) << e;
    EXPECT_NE(e.find("T = 32"), std::string::npos) << e;
  }
  EXPECT_TRUE(f.loaded.empty());
}

// A dump whose layer 1 has no values: the reader's error reaches the caller unchanged.
class MissingValues final : public kvlab::DumpReader {
 public:
  MissingValues() {
    info_.model = "test";
    info_.num_layers = 2;
    info_.num_q_heads = 2;
    info_.num_kv_heads = 1;
    info_.head_dim = 8;
    info_.tokens = 32;
  }
  const kvlab::DumpInfo& info() const override { return info_; }
  const std::string& path() const override { return path_; }
  Tensor read(int64_t layer, kvlab::Role role) const override {
    check_request(layer, role, 0);
    if (layer == 1 && role == kvlab::Role::V)
      throw std::runtime_error(path_ + ": layer 1 has no v (expected a dataset /layers/1/v)");
    return evtest::normal(info_.shape(role), 7 + (uint32_t)layer);
  }

 private:
  kvlab::DumpInfo info_;
  std::string path_ = "missing_v.h5";
};

TEST(EvaluateBadInput, DumpMissingARole) {
  const MissingValues dump;
  const auto& in = dump.info();
  const EvalShape shape{in.num_layers, in.num_q_heads, in.num_kv_heads, in.head_dim, in.tokens};
  auto load = [&](int64_t l) {
    return LayerQKV{dump.read(l, kvlab::Role::Q), dump.read(l, kvlab::Role::K), dump.read(l, kvlab::Role::V)};
  };
  const std::string e = error_of([&] { kvlab::evaluate(shape, load, options({"int8"})); });
  EXPECT_NE(e.find("missing_v.h5: layer 1 has no v"), std::string::npos) << e;
}

TEST(EvaluateBadInput, LoaderShapesAreChecked) {
  Fake f(1, 2, 1, 32, 8, false);
  f.layers[0].v = evtest::normal({1, 31, 8}, 1);
  std::string e = error_of([&] { kvlab::evaluate(f.shape, f.loader(), options({"int8"})); });
  EXPECT_NE(e.find("layer 0 role v has shape (1, 31, 8), expected (1, 32, 8)"), std::string::npos) << e;
  Fake g(1, 2, 1, 32, 8, false);
  g.layers[0].q.data[5] = std::nanf("");
  e = error_of([&] { kvlab::evaluate(g.shape, g.loader(), options({"int8"})); });
  EXPECT_NE(e.find("layer 0 q"), std::string::npos) << e;
  EvalShape bad = g.shape;
  bad.num_q_heads = 3;
  bad.num_kv_heads = 2;
  e = error_of([&] { kvlab::evaluate(bad, g.loader(), options({"int8"})); });
  EXPECT_NE(e.find("3 query heads are not a multiple of 2"), std::string::npos) << e;
}

// --- real data ----------------------------------------------------------------------------------

TEST(Evaluate, BuiltInDumpMatchesDoubleLoop) {
  const std::string path = kvlab::default_dump_path();
  if (!std::filesystem::exists(path)) GTEST_SKIP() << "no built-in dump at " << path;
  const auto dump = kvlab::open_dump(path);
  const auto& in = dump->info();
  const EvalShape shape{in.num_layers, in.num_q_heads, in.num_kv_heads, in.head_dim, in.tokens};
  auto load = [&](int64_t l) {
    return LayerQKV{dump->read(l, kvlab::Role::Q), dump->read(l, kvlab::Role::K),
                    dump->read(l, kvlab::Role::V)};
  };
  const EvalResult r = kvlab::evaluate(shape, load, {});
  const auto pos = kvlab::select_queries({}, in.tokens);
  for (const auto& m : r.methods) {
    AttnStats want;
    for (int64_t l = 0; l < in.num_layers; ++l) {
      const LayerQKV x = load(l);
      const auto c = m.method->apply(x.k.view(), x.v.view());
      for (int64_t h = 0; h < in.num_q_heads; ++h)
        want.merge(evtest::errors(x.q, x.k, x.v, c.k, c.v, h, pos));
    }
    EXPECT_NEAR(m.attn.score_mse(), want.score_mse(), 1e-5 * want.score_mse()) << m.name;
    EXPECT_NEAR(m.attn.kl(), want.kl(), 1e-5 * want.kl()) << m.name;
    EXPECT_NEAR(m.attn.out_rel_err(), want.out_rel_err(), 1e-4 * want.out_rel_err()) << m.name;
    EXPECT_NEAR(m.attn.topk_overlap(), want.topk_overlap(), 1e-3) << m.name;
  }
}

}  // namespace
