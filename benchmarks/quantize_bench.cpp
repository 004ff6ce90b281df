// quantize+pack and dequantize throughput of each preset's key and value quantizers on a
// (32, 32768, 128) fp16 tensor, on 1 and 2 threads. Reported: bytes/s of fp16 input
// (quantize) or of fp16-equivalent elements decoded to fp32 (dequantize).
// KVLAB_BENCH_INPUT=<file.npy>: quantize that float16 array (of this shape) instead of the
// generated one; benchmarks/python_quantize.py passes its input so both sides read the same values
// (and generating 134M normals, ~2 s, is not repeated per process).
// Min time: 1 s unless --benchmark_min_time is given (a per-benchmark MinTime would override it).
#include <benchmark/benchmark.h>
#include <sys/resource.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>

#include "gaussian_halves.h"
#include "kvlab/method.h"
#include "kvlab/npy.h"
#include "kvlab/quantizer.h"
#include "kvlab/threads.h"
#include "thread_stats.h"

namespace {

const std::vector<int64_t> kShape = {32, 32768, 128};

std::vector<uint16_t> read_input(const char* path) {
  const kvlab::NpyArray a = kvlab::read_npy(path);
  if (a.descr != "<f2" || a.shape != kShape)
    throw std::invalid_argument(std::string("KVLAB_BENCH_INPUT '") + path + "': " + a.descr + " " +
                                kvlab::shape_string(a.shape) + ", expected <f2 " +
                                kvlab::shape_string(kShape));
  std::vector<uint16_t> x(a.numel());
  std::memcpy(x.data(), a.bytes.data(), a.bytes.size());
  return x;
}

const std::vector<uint16_t>& input() {
  static const std::vector<uint16_t> x = [] {
    const char* path = std::getenv("KVLAB_BENCH_INPUT");
    return path && *path ? read_input(path) : gaussian_halves(32ll * 32768 * 128);
  }();
  return x;
}

// Minor page faults, user and system CPU seconds, voluntary and involuntary context switches of
// the process so far (all threads).
struct Usage {
  double minflt, user, sys, nvcsw, nivcsw;
};
Usage usage() {
  rusage r{};
  getrusage(RUSAGE_SELF, &r);
  return {(double)r.ru_minflt, r.ru_utime.tv_sec + r.ru_utime.tv_usec * 1e-6,
          r.ru_stime.tv_sec + r.ru_stime.tv_usec * 1e-6, (double)r.ru_nvcsw, (double)r.ru_nivcsw};
}

kvlab::QuantizerSpec quantizer_of(const std::string& preset, bool key) {
  const kvlab::MethodPtr m = kvlab::parse_method(preset);
  return key ? *m->key_quantizer() : *m->value_quantizer();
}

void BM_Quantize(benchmark::State& st, std::string preset, bool key) {
  const kvlab::ScopedThreads threads((int)st.range(0));
  const kvlab::TensorView x{input().data(), kvlab::DType::F16, kShape};
  const auto spec = quantizer_of(preset, key);
  const auto t0 = bench::thread_samples();
  const double steal0 = bench::steal_ms();
  const Usage u0 = usage();
  for (auto _ : st) benchmark::DoNotOptimize(kvlab::quantize(x, spec));
  const Usage u1 = usage();
  const double steal1 = bench::steal_ms();
  const bench::ThreadDelta td = bench::thread_delta(t0, bench::thread_samples());
  // per call: page faults (fresh output vectors are touched first here) and where CPU time goes;
  // per thread (benchmarks/thread_stats.h): the calling thread's and OpenMP's workers' time on a
  // CPU and waiting for one, and where they last ran (python_quantize.py reads the same)
  const auto per_call = [&](double v) { return benchmark::Counter(v, benchmark::Counter::kAvgIterations); };
  st.counters["minflt"] = per_call(u1.minflt - u0.minflt);
  st.counters["user_s"] = per_call(u1.user - u0.user);
  st.counters["sys_s"] = per_call(u1.sys - u0.sys);
  st.counters["nvcsw"] = per_call(u1.nvcsw - u0.nvcsw);
  st.counters["nivcsw"] = per_call(u1.nivcsw - u0.nivcsw);
  st.counters["steal_ms"] = per_call(steal1 - steal0);
  st.counters["main_run_ms"] = per_call(td.main_run);
  st.counters["main_wait_ms"] = per_call(td.main_wait);
  st.counters["omp_run_ms"] = per_call(td.other_run);
  st.counters["omp_wait_ms"] = per_call(td.other_wait);
  st.counters["main_cpu"] = td.main_cpu;
  st.counters["omp_cpu"] = td.other_cpu;
  st.SetBytesProcessed(st.iterations() * (int64_t)input().size() * 2);
  st.SetLabel(kvlab::to_string(spec));
}

void BM_Dequantize(benchmark::State& st, std::string preset, bool key) {
  const kvlab::ScopedThreads threads((int)st.range(0));
  const kvlab::TensorView x{input().data(), kvlab::DType::F16, kShape};
  const auto q = kvlab::quantize(x, quantizer_of(preset, key));
  std::vector<float> out(input().size());  // reused: time the decoding, not page faults
  for (auto _ : st) {
    kvlab::dequantize(q, out.data());
    benchmark::DoNotOptimize(out.data());
  }
  st.SetBytesProcessed(st.iterations() * (int64_t)input().size() * 2);
  st.SetLabel(kvlab::to_string(q.spec));
}

void register_all() {
  for (const char* p : {"int8", "kivi-4", "kivi-2", "kitty", "kitty-pro"})
    for (bool key : {true, false}) {
      if (std::string(p) == "kitty-pro" && !key) continue;  // same value quantizer as kitty
      const std::string name = std::string(p) + (key ? "/K" : "/V");
      benchmark::RegisterBenchmark(("quantize/" + name).c_str(), BM_Quantize, p, key)
          ->Arg(1)
          ->Arg(2)
          ->Unit(benchmark::kMillisecond)
          ->UseRealTime();
      benchmark::RegisterBenchmark(("dequantize/" + name).c_str(), BM_Dequantize, p, key)
          ->Arg(1)
          ->Arg(2)
          ->Unit(benchmark::kMillisecond)
          ->UseRealTime();
    }
}

}  // namespace

int main(int argc, char** argv) {
  if (const char* path = std::getenv("KVLAB_BENCH_INPUT"); path && *path) try {  // a bad file: its message
      input();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "kvlab_bench_quantize: %s\n", e.what());
      return 1;
    }
  register_all();
  std::vector<char*> args(argv, argv + argc);
  bool min_time = false;
  for (char* a : args) min_time |= std::strncmp(a, "--benchmark_min_time", 20) == 0;
  char default_min_time[] = "--benchmark_min_time=1";
  if (!min_time) args.insert(args.begin() + 1, default_min_time);
  int n = (int)args.size();
  args.push_back(nullptr);
  benchmark::Initialize(&n, args.data());
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
