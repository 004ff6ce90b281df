// `kvlab sensitivity --device cuda`: the CUDA sums, finished by the CPU, against the CPU's fast
// path row by row (kSensBound, docs/EVAL_JSON.md "Devices"), on the shipped dump, on a
// llama3-8b-shaped synthetic one, with shifts that take the CPU's fallbacks, and in many chunks;
// and the device a rank picks. GPU cases skip without a GPU.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <cmath>
#include <cstdio>
#include <memory>
#include <stdexcept>
#include <string>

#include "kvlab/dump.h"
#include "kvlab/sensitivity.h"
#include "kvlab/synthetic_dump.h"
#include "kvlab_eval_gpu/attention_gpu.h"
#include "kvlab_eval_gpu/sensitivity_gpu.h"

namespace {

using namespace kvlab;

// Per row, relative. The GPU evaluates the CPU's expm1 polynomials term for term; what differs is
// the order of the key sums (and of the softmax's): relative ~n eps, which the expanded form
// C - 2AB + A^2 S0 amplifies at most 1e6 times before the CPU switches to the direct sum.
constexpr double kSensBound = 1e-6;

std::shared_ptr<CudaSensitivity> open_gpu(int64_t tile_elems = 0) {
  try {
    return std::make_shared<CudaSensitivity>(0, tile_elems);
  } catch (const std::runtime_error& e) {
    std::printf("%s\n", e.what());
    return nullptr;
  }
}
#define SKIP_WITHOUT_GPU(gpu) \
  if (!(gpu)) GTEST_SKIP() << "no usable CUDA device"

LayerQKV layer_of(const DumpReader& r, int64_t l) { return {r.read(l, Role::Q), r.read(l, Role::K), {}}; }

// The layer on the CPU and on the GPU, every row compared; returns the largest difference.
// most_nonzero: most rows must see a perturbation (not so where attention is one-hot).
double compare(const LayerQKV& x, SensitivityOptions o, const std::shared_ptr<CudaSensitivity>& gpu,
               bool most_nonzero = true) {
  const std::vector<int64_t> pos = select_queries(o.queries, x.k.shape[1]);
  std::vector<SensitivityRow> cpu, dev;
  layer_sensitivity(0, x.q, x.k, pos, o, cpu);
  const int64_t units = gpu->times().units;
  o.backend = cuda_sensitivity_backend(gpu);
  layer_sensitivity(0, x.q, x.k, pos, o, dev);
  EXPECT_EQ(gpu->times().units - units, x.k.shape[0]);  // one unit per KV head
  EXPECT_EQ(cpu.size(), dev.size());
  double worst = 0;
  int nonzero = 0;
  for (size_t i = 0; i < cpu.size() && i < dev.size(); ++i) {
    const double a = cpu[i].attn_score_mse, b = dev[i].attn_score_mse,
                 m = std::max(std::fabs(a), std::fabs(b));
    const double r = m == 0 ? 0 : std::fabs(a - b) / m;
    worst = std::max(worst, r);
    EXPECT_LE(r, kSensBound) << "q_head " << cpu[i].q_head << " channel " << cpu[i].channel << ": cpu " << a
                             << ", gpu " << b;
    EXPECT_EQ(cpu[i].stats.mean_abs, dev[i].stats.mean_abs);
    nonzero += a > 0;
  }
  if (most_nonzero) EXPECT_GT(nonzero, (int)cpu.size() / 2);  // the comparison saw real perturbations
  EXPECT_GT(nonzero, 0);
  std::printf("  %zu rows, max relative difference %.3g\n", cpu.size(), worst);
  return worst;
}

TEST(SensitivityGpu, MatchesCpuOnTheShippedDump) {
  auto gpu = open_gpu();
  SKIP_WITHOUT_GPU(gpu);
  const auto dump = open_dump(std::string(KVLAB_SOURCE_DIR) + "/data/stories260K.h5");
  SensitivityOptions o;
  o.group = 32;
  o.sink = 4;
  o.queries = parse_queries("stride:3");
  for (int64_t l : {0L, dump->info().num_layers - 1}) compare(layer_of(*dump, l), o, gpu);
}

// llama3-8b's shape (D 128, GQA 4, outlier channels, sinks), fp16 values: the polynomial degrees
// 4, 7 and 10 and the exp path all occur.
TEST(SensitivityGpu, MatchesCpuOnASyntheticLlama) {
  auto gpu = open_gpu();
  SKIP_WITHOUT_GPU(gpu);
  SyntheticDumpParams p = synthetic_preset("llama3-8b");
  p.layers = 1;
  p.tokens = 1100;
  p.q_heads = 8;
  p.kv_heads = 2;
  SensitivityOptions o;
  o.queries = parse_queries("last:150");  // three query tiles, the first short of the last group
  compare(layer_of(SyntheticDump(p), 0), o, gpu);
  o.bits = 1;
  o.sink = 0;
  compare(layer_of(SyntheticDump(p), 0), o, gpu);
}

// Shifts between 0.5 and 300 (the exp path beside the polynomial), in tiles of a few queries:
// many chunks per head.
TEST(SensitivityGpu, LargeShiftsInManyChunks) {
  auto gpu = open_gpu(5 * 200);
  SKIP_WITHOUT_GPU(gpu);
  SyntheticDumpParams p = synthetic_preset("tiny");
  p.tokens = 200;
  LayerQKV x = layer_of(SyntheticDump(p), 0);
  for (int64_t i = 0; i < 200; ++i) x.k.data[i * 16 + 3] *= 40.0f;
  for (int64_t h = 0; h < 2; ++h)
    for (int64_t i = 0; i < 200; ++i) x.q.data[(h * 200 + i) * 16 + 3] *= 10.0f;
  SensitivityOptions o;
  o.group = 32;
  o.sink = 4;
  o.queries = parse_queries("stride:7");
  compare(x, o, gpu);
}

// Shifts beyond 300, which the CPU recomputes from the logits, and nearly one-hot rows (the
// cancellation fallback).
TEST(SensitivityGpu, HugeShiftsTakeTheCpusFallbacks) {
  auto gpu = open_gpu();
  SKIP_WITHOUT_GPU(gpu);
  SyntheticDumpParams p = synthetic_preset("tiny");
  p.tokens = 200;
  LayerQKV x = layer_of(SyntheticDump(p), 0);
  for (int64_t i = 0; i < 200; ++i) x.k.data[i * 16 + 5] *= 3000.0f;
  for (int64_t h = 0; h < 2; ++h)
    for (int64_t i = 0; i < 200; ++i) x.q.data[(h * 200 + i) * 16 + 5] *= 300.0f;
  SensitivityOptions o;
  o.group = 32;
  o.sink = 4;
  o.queries = parse_queries("stride:9");
  compare(x, o, gpu, false);
}

// The device of a rank: its local rank's GPU, a clear error naming the rank and host when the
// node has fewer GPUs than ranks, or the GPUs shared round-robin when asked. Without a GPU, the
// error says so (and names the host).
TEST(SensitivityGpu, DeviceOfARank) {
  int count = 0;
  try {
    setenv("OMPI_COMM_WORLD_LOCAL_RANK", "0", 1);
    count = cuda_device_for_this_rank() + 1;
    while (true) {  // count the GPUs through the ranks that have one
      setenv("OMPI_COMM_WORLD_LOCAL_RANK", std::to_string(count).c_str(), 1);
      try {
        EXPECT_EQ(cuda_device_for_this_rank(), count);
        ++count;
      } catch (const std::runtime_error& e) {
        const std::string m = e.what();
        EXPECT_NE(m.find("local rank " + std::to_string(count) + " (OMPI_COMM_WORLD_LOCAL_RANK) on host "),
                  std::string::npos)
            << m;
        EXPECT_NE(m.find("--share-gpu"), std::string::npos) << m;
        break;
      }
    }
    setenv("OMPI_COMM_WORLD_LOCAL_RANK", std::to_string(count + 1).c_str(), 1);
    EXPECT_EQ(cuda_device_for_this_rank(true), (count + 1) % count);
  } catch (const std::runtime_error& e) {
    EXPECT_EQ(count, 0) << e.what();
    EXPECT_NE(std::string(e.what()).find("no CUDA device is usable on host"), std::string::npos) << e.what();
  }
  unsetenv("OMPI_COMM_WORLD_LOCAL_RANK");
}

}  // namespace
