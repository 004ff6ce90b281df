// CPU throughput of the scaled float formats (kFloatFormats) on a (8, 16384, 128) fp16 tensor:
// quantize with dynamic scales (absmax pass + codes), quantize with given (calibrated) scales,
// and dequantize to fp32, on 1 thread (the per-core figure) and 2. Reported: bytes/s of fp16
// input (quantize) or of fp16-equivalent elements decoded (dequantize).
#include <benchmark/benchmark.h>

#include "gaussian_halves.h"
#include "kvlab/float_quant.h"
#include "kvlab/formats.h"
#include "kvlab/threads.h"

namespace {

const std::vector<int64_t> kShape = {8, 16384, 128};

const std::vector<uint16_t>& input() {
  static const std::vector<uint16_t> x = gaussian_halves(8ll * 16384 * 128);
  return x;
}

kvlab::TensorView view() { return {input().data(), kvlab::DType::F16, kShape}; }

void BM_Quantize(benchmark::State& st, kvlab::FloatSpec spec, bool dynamic) {
  const kvlab::ScopedThreads threads((int)st.range(0));
  const std::vector<float> scales = kvlab::float_scales(view(), spec);
  for (auto _ : st)
    benchmark::DoNotOptimize(dynamic ? kvlab::quantize_float(view(), spec)
                                     : kvlab::quantize_float(view(), spec, scales));
  st.SetBytesProcessed(st.iterations() * (int64_t)input().size() * 2);
}

void BM_Dequantize(benchmark::State& st, kvlab::FloatSpec spec) {
  const kvlab::ScopedThreads threads((int)st.range(0));
  const kvlab::FloatQuantized q = kvlab::quantize_float(view(), spec);
  for (auto _ : st) benchmark::DoNotOptimize(kvlab::dequantize_float(q));
  st.SetBytesProcessed(st.iterations() * (int64_t)input().size() * 2);
}

void register_all() {
  for (const kvlab::FormatEntry& e : kvlab::kFloatFormats) {
    const kvlab::FloatSpec spec = kvlab::parse_float_spec(e.spec);
    const std::string name = e.name;
    auto add = [](benchmark::internal::Benchmark* b) {
      b->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime()->MinTime(0.5);
    };
    add(benchmark::RegisterBenchmark(("quantize-dynamic/" + name).c_str(), BM_Quantize, spec, true));
    add(benchmark::RegisterBenchmark(("quantize-given/" + name).c_str(), BM_Quantize, spec, false));
    add(benchmark::RegisterBenchmark(("dequantize/" + name).c_str(), BM_Dequantize, spec));
  }
}

}  // namespace

int main(int argc, char** argv) {
  register_all();
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
