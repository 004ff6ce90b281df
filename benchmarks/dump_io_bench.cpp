// Dump I/O speed: write and read one layer of a llama3-8b-shaped dump (32 q heads, 8 KV heads,
// 4096 tokens, head_dim 128, fp16 as captured: 48 MiB per layer) through the HDF5 format.
// Throughput counts the uncompressed fp16 bytes. Usage: kvlab_bench_dump_io [--benchmark_*]
#include <benchmark/benchmark.h>

#include <cstdio>
#include <filesystem>

#include "kvlab/dump.h"
#include "kvlab/synthetic.h"

namespace {

kvlab::DumpInfo layer_info() {
  kvlab::DumpInfo in;
  in.model = "bench";
  in.num_layers = 1;
  in.num_q_heads = 32;
  in.num_kv_heads = 8;
  in.head_dim = 128;
  in.tokens = 4096;
  in.dtype = kvlab::CaptureDtype::F16;
  return in;
}

// Key-like data for every role (q: 4 generated blocks of 8 heads), fp16-representable.
struct LayerData {
  kvlab::Tensor q, k, v;
  LayerData() {
    const auto kv = kvlab::synthetic_kv({.heads = 8, .tokens = 4096, .head_dim = 128, .seed = 1});
    k = kv.k;
    v = kv.v;
    q.shape = {32, 4096, 128};
    for (int i = 0; i < 4; ++i) q.data.insert(q.data.end(), k.data.begin(), k.data.end());
  }
};

const LayerData& data() {
  static LayerData d;
  return d;
}

std::string bench_path() { return (std::filesystem::temp_directory_path() / "kvlab_bench_dump.h5").string(); }

void write_layer(bool compress) {
  kvlab::DumpWriter w(bench_path(), layer_info(), {.compress = compress});
  w.write(0, kvlab::Role::Q, data().q.view());
  w.write(0, kvlab::Role::K, data().k.view());
  w.write(0, kvlab::Role::V, data().v.view());
  w.commit();
}

constexpr int64_t kLayerBytes = (32 + 8 + 8) * 4096 * 128 * 2;

void BM_WriteLayer(benchmark::State& state) {
  for (auto _ : state) write_layer(state.range(0) != 0);
  state.SetBytesProcessed(state.iterations() * kLayerBytes);
  state.counters["file_MiB"] = std::filesystem::file_size(bench_path()) / 1048576.0;
}

void BM_ReadLayer(benchmark::State& state) {
  write_layer(state.range(0) != 0);
  auto dump = kvlab::open_dump(bench_path());
  for (auto _ : state) benchmark::DoNotOptimize(dump->read_layer(0));
  state.SetBytesProcessed(state.iterations() * kLayerBytes);
}

BENCHMARK(BM_WriteLayer)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_ReadLayer)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
