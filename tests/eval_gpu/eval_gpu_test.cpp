// `kvlab eval --device cuda`: the CUDA attention unit against an fp64 oracle on the unit's own
// inputs (fp64 rounding apart), and the same dump through evaluate() with the CPU kernel and with
// the CUDA unit, every metric of every method, layer and head compared (the CPU's fp32 rounding
// apart). Skips (with the reason) where no CUDA device is usable.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <map>
#include <memory>
#include <random>

#include "kvlab/boost_sweep.h"
#include "kvlab/evaluate.h"
#include "kvlab/synthetic_dump.h"
#include "kvlab_eval_gpu/attention_gpu.h"
#include "unit_oracle.h"
#include "unit_test_data.h"

namespace {

using kvlab::AttnStats;
using kvlab::EvalResult;

// The bounds of docs/EVAL_JSON.md ("Devices"), GPU against CPU, relative: the dump's score MSE,
// output error and KL within kBound (measured on an H100, 2026-11-23: at most 3.4e-7 on these
// cases); each head's sums within kHeadBound (measured 5.3e-6); top-8 overlaps, which move when
// an fp32 near-tie orders differently, within kTopkBound per head (measured 1.4e-4) and
// kTopkDumpBound for the dump (8.9e-6). Counts and the reconstruction errors (core on the CPU
// both ways) are identical.
constexpr double kBound = 1e-6, kHeadBound = 2e-5, kTopkBound = 1e-3, kTopkDumpBound = 1e-4;

std::shared_ptr<kvlab::CudaAttention> open_gpu(int64_t tile_elems = 0) {
  try {
    return std::make_shared<kvlab::CudaAttention>(0, tile_elems);
  } catch (const std::runtime_error& e) {
    std::printf("%s\n", e.what());
    return nullptr;
  }
}
#define SKIP_WITHOUT_GPU(gpu) \
  if (!(gpu)) GTEST_SKIP() << "no usable CUDA device"

double rel(double a, double b) {
  const double m = std::max(std::fabs(a), std::fabs(b));
  return m == 0 ? 0 : std::fabs(a - b) / m;
}

// Every number of the two results; returns the largest relative difference per field.
std::map<std::string, double> compare(const EvalResult& cpu, const EvalResult& gpu) {
  std::map<std::string, double> worst;
  EXPECT_EQ(cpu.methods.size(), gpu.methods.size());
  auto field = [&](const std::string& name, double a, double b, const std::string& where, double bound) {
    const double r = rel(a, b);
    worst[name] = std::max(worst[name], r);
    EXPECT_LE(r, bound) << name << " at " << where << ": cpu " << a << ", gpu " << b;
  };
  for (size_t m = 0; m < cpu.methods.size(); ++m) {
    const auto &a = cpu.methods[m], &b = gpu.methods[m];
    EXPECT_EQ(a.layers.size(), b.layers.size());
    if (a.layers.size() != b.layers.size()) continue;
    for (size_t l = 0; l < a.layers.size(); ++l) {
      const auto &la = a.layers[l], &lb = b.layers[l];
      for (size_t g = 0; g < la.key.size(); ++g) {
        EXPECT_EQ(la.key[g].sq_err, lb.key[g].sq_err);
        EXPECT_EQ(la.value[g].sq_err, lb.value[g].sq_err);
        EXPECT_EQ(la.key[g].max_abs, lb.key[g].max_abs);
      }
      for (size_t h = 0; h < la.attn.size(); ++h) {
        const AttnStats &x = la.attn[h], &y = lb.attn[h];
        const std::string where =
            a.name + " layer " + std::to_string(la.layer) + " head " + std::to_string(h);
        EXPECT_EQ(x.score_count, y.score_count) << where;
        EXPECT_EQ(x.queries, y.queries) << where;
        field("score_sq_err", x.score_sq_err, y.score_sq_err, where, kHeadBound);
        field("out_sq_err", x.out_sq_err, y.out_sq_err, where, kHeadBound);
        field("out_sq_ref", x.out_sq_ref, y.out_sq_ref, where, kHeadBound);
        field("kl_sum", x.kl_sum, y.kl_sum, where, kHeadBound);
        field("topk_sum", x.topk_sum, y.topk_sum, where, kTopkBound);
      }
    }
    field("score_mse (dump)", a.attn.score_mse(), b.attn.score_mse(), a.name, kBound);
    field("out_rel_err (dump)", a.attn.out_rel_err(), b.attn.out_rel_err(), a.name, kBound);
    field("kl (dump)", a.attn.kl(), b.attn.kl(), a.name, kBound);
    field("topk_overlap (dump)", a.attn.topk_overlap(), b.attn.topk_overlap(), a.name, kTopkDumpBound);
  }
  for (const auto& [name, r] : worst) std::printf("  %-22s max relative difference %.3g\n", name.c_str(), r);
  return worst;
}

EvalResult run(const kvlab::EvalShape& shape, const kvlab::LayerLoader& load, kvlab::EvalOptions opt,
               std::shared_ptr<kvlab::CudaAttention> gpu) {
  if (gpu) {
    opt.backend = kvlab::cuda_backend(gpu);
    opt.prefetch = true;
  }
  return kvlab::evaluate(shape, load, opt);
}

// A synthetic dump of llama3-8b's shape (GQA 4, D 128, fp16 values, sinks, outlier channels),
// every default method and every query.
void synthetic_case(const std::string& queries, int64_t tile_elems) {
  auto gpu = open_gpu(tile_elems);
  SKIP_WITHOUT_GPU(gpu);
  kvlab::SyntheticDumpParams p = kvlab::synthetic_preset("llama3-8b");
  p.layers = 2;
  p.tokens = 1500;
  p.q_heads = 8;
  p.kv_heads = 2;
  const kvlab::SyntheticDump dump(p);
  const kvlab::EvalShape shape{p.layers, p.q_heads, p.kv_heads, p.head_dim, p.tokens};
  const kvlab::LayerLoader load = [&](int64_t l) {
    return kvlab::LayerQKV{dump.read(l, kvlab::Role::Q), dump.read(l, kvlab::Role::K),
                           dump.read(l, kvlab::Role::V)};
  };
  kvlab::EvalOptions opt;
  opt.queries = kvlab::parse_queries(queries);
  const EvalResult cpu = run(shape, load, opt, nullptr), dev = run(shape, load, opt, gpu);
  compare(cpu, dev);
  EXPECT_EQ(gpu->times().units, p.layers * p.kv_heads);
}

TEST(EvalGpu, SyntheticLlamaAllQueries) { synthetic_case("all", 0); }

// Tiles of a few rows: many chunks per unit, each with its own key count.
TEST(EvalGpu, SyntheticLlamaManyChunks) { synthetic_case("stride:3", 8 * 1500 * 9); }

// fp32 values (not fp16), one query head per KV head, D 64, a stride of queries, specs beyond
// the presets.
TEST(EvalGpu, Float32NoGroupingStride) {
  auto gpu = open_gpu();
  SKIP_WITHOUT_GPU(gpu);
  const int64_t L = 2, H = 3, T = 333, D = 64;
  std::mt19937 rng(7);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<kvlab::LayerQKV> layers;
  for (int64_t l = 0; l < L; ++l) {
    kvlab::LayerQKV x;
    for (auto* t : {&x.q, &x.k, &x.v}) {
      t->shape = {H, T, D};
      t->data.resize(H * T * D);
      for (auto& v : t->data) v = nd(rng);
    }
    for (int64_t i = 0; i < H * T; ++i) x.k.data[i * D + 3] *= 8.0f;  // an outlier channel
    layers.push_back(std::move(x));
  }
  const kvlab::EvalShape shape{L, H, H, D, T};
  const kvlab::LayerLoader load = [&](int64_t l) { return layers.at(l); };
  kvlab::EvalOptions opt;
  opt.methods = {"int8", "kivi-4", "kivi-2", "kitty:group=64,sink=8,residual=64", "fp8-e4m3", "nvfp4"};
  opt.queries = kvlab::parse_queries("stride:5");
  const EvalResult cpu = run(shape, load, opt, nullptr), dev = run(shape, load, opt, gpu);
  compare(cpu, dev);
}

// The unit alone against the fp64 oracle: only fp64 rounding (GEMM order, exp) separates them.
// Whole-unit tiles, then tiles of 12 rows (each chunk its own key count).
TEST(EvalGpu, UnitMatchesFp64Oracle) {
  for (int64_t tile_elems : {int64_t(0), int64_t(12 * 700)}) {
    auto gpu = open_gpu(tile_elems);
    SKIP_WITHOUT_GPU(gpu);
    const evgpu::UnitData data(11);
    kvlab::AttentionUnitResult got;
    gpu->run(data.unit, got);
    const kvlab::AttentionUnitResult want = evgpu::unit_oracle(data.unit);
    double worst = 0;
    for (int64_t h = 0; h < data.heads; ++h) {
      EXPECT_LE(rel(got.ref_sq[h], want.ref_sq[h]), 1e-9) << "head " << h;
      for (size_t m = 0; m < want.stats.size(); ++m) {
        const AttnStats &g = got.stats[m][h], &w = want.stats[m][h];
        EXPECT_EQ(g.score_count, w.score_count);
        EXPECT_EQ(g.queries, w.queries);
        EXPECT_EQ(g.topk_sum, w.topk_sum) << "cache " << m << " head " << h;
        for (auto [a, b] : {std::pair{g.score_sq_err, w.score_sq_err},
                            {g.kl_sum, w.kl_sum},
                            {g.out_sq_err, w.out_sq_err},
                            {g.out_sq_ref, w.out_sq_ref}}) {
          EXPECT_LE(rel(a, b), 1e-9) << "cache " << m << " head " << h << ": gpu " << a << ", oracle " << b;
          worst = std::max(worst, rel(a, b));
        }
      }
    }
    std::printf("  tiles %lld: largest relative difference to the fp64 oracle %.3g\n", (long long)tile_elems,
                worst);
  }
}

// kvlab boost-sweep --device cuda: every (selector, rate, seed) row, summed over layers and heads,
// as the dump totals of eval. (Added after the measured GPU run: not yet run on a GPU.)
TEST(EvalGpu, BoostSweepMatchesCpu) {
  auto gpu = open_gpu();
  SKIP_WITHOUT_GPU(gpu);
  kvlab::SyntheticDumpParams p = kvlab::synthetic_preset("llama3-8b");
  p.layers = 2;
  p.tokens = 1024;
  p.q_heads = 8;
  p.kv_heads = 2;
  const kvlab::SyntheticDump dump(p);
  const kvlab::EvalShape shape{p.layers, p.q_heads, p.kv_heads, p.head_dim, p.tokens};
  const kvlab::LayerLoader load = [&](int64_t l) {
    return kvlab::LayerQKV{dump.read(l, kvlab::Role::Q), dump.read(l, kvlab::Role::K),
                           dump.read(l, kvlab::Role::V)};
  };
  kvlab::SweepOptions o;
  o.rates = {0, 0.125, 0.5};
  o.seeds = 2;
  const kvlab::SweepResult cpu = kvlab::boost_sweep(shape, load, o);
  o.backend = kvlab::cuda_backend(gpu);
  const kvlab::SweepResult dev = kvlab::boost_sweep(shape, load, o);
  ASSERT_EQ(cpu.rows.size(), dev.rows.size());
  double worst = 0;
  for (size_t i = 0; i < cpu.rows.size(); ++i) {
    const AttnStats &a = cpu.rows[i].attn, &b = dev.rows[i].attn;
    EXPECT_EQ(a.score_count, b.score_count);
    for (auto [x, y] :
         {std::pair{a.score_mse(), b.score_mse()}, {a.out_rel_err(), b.out_rel_err()}, {a.kl(), b.kl()}}) {
      EXPECT_LE(rel(x, y), kBound) << "row " << i << ": cpu " << x << ", gpu " << y;
      worst = std::max(worst, rel(x, y));
    }
    EXPECT_LE(rel(a.topk_overlap(), b.topk_overlap()), kTopkBound)
        << "row " << i;  // 4096 rows: one flip is 4e-5
  }
  std::printf("  boost-sweep: largest relative difference %.3g\n", worst);
}

TEST(EvalGpu, MissingDeviceIsAClearError) {
  auto gpu = open_gpu();
  SKIP_WITHOUT_GPU(gpu);
  try {
    kvlab::CudaAttention bad(1000);
    FAIL() << "device 1000 accepted";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("device 1000 does not exist"), std::string::npos) << e.what();
  }
}

}  // namespace
