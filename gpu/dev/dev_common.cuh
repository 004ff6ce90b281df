// Shared host scaffolding of the exploration files in gpu/dev/ (llm.c's dev/cuda/common.h):
// test data, device buffers, a DevFormat from core's QuantizedTensor, byte comparison against
// core's CPU reference, timing, and the command line every file takes:
//   <file> [--validate] [--bench] [--reps N] [--elements N]   (neither flag: both)
// --validate returns 1 on any mismatching byte, 2 without a CUDA device.
// Each file copies the kernels it compares (production keeps only the winner), so it builds
// and runs on its own: it links kvlab_core (the CPU reference) and the CUDA runtime only.
#pragma once
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "fastq.cuh"  // the production helpers (recipe calls, fast quotient, order keys)
#include "kvlab/hash.h"
#include "kvlab/pack.h"
#include "kvlab/quantizer.h"

namespace kvlab::gpu::dev {

inline void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    std::fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(e));
    std::exit(3);
  }
}

struct Options {
  bool validate = true;
  bool bench = true;
  int reps = 20;
  int64_t elements = int64_t(1) << 27;  // bench tensor: (elements / (4096 * 128), 4096, 128)
};

inline Options parse_options(int argc, char** argv, const char* usage) {
  Options o;
  bool v = false, b = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--validate") {
      v = true;
    } else if (a == "--bench") {
      b = true;
    } else if (a == "--reps" && i + 1 < argc) {
      o.reps = std::max(1, std::atoi(argv[++i]));
    } else if (a == "--elements" && i + 1 < argc) {
      o.elements = std::max<int64_t>(int64_t(1) << 19, std::atoll(argv[++i]));
    } else {
      std::fprintf(stderr, "%s\nusage: %s [--validate] [--bench] [--reps N] [--elements N]\n", usage,
                   argv[0]);
      std::exit(3);
    }
  }
  if (v || b) {
    o.validate = v;
    o.bench = b;
  }
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
    std::fprintf(stderr, "%s: no CUDA device\n", argv[0]);
    std::exit(2);
  }
  return o;
}

// Deterministic test data: uniform values with a few large channels (as keys have), fp32 and
// the same values rounded to fp16.
struct HostData {
  std::vector<int64_t> shape;
  std::vector<float> f32;
  std::vector<uint16_t> f16;
};
inline HostData make_data(std::vector<int64_t> shape, uint64_t seed) {
  HostData d{shape, {}, {}};
  const int64_t n = numel(shape), D = shape.back();
  d.f32.resize(n);
  d.f16.resize(n);
  for (int64_t i = 0; i < n; ++i) {
    const double u = (double)(murmur3_fmix64(seed * kGoldenGamma + (uint64_t)i) >> 11) * 0x1.0p-53;
    const float v = (float)((u * 2.0 - 1.0) * ((i % D) % 16 == 3 ? 8.0 : 1.0));
    d.f16[i] = float_to_half(v);
    d.f32[i] = half_to_float(d.f16[i]);  // fp16-exact, so both inputs hold the same numbers
  }
  return d;
}

struct Buffer {
  void* p = nullptr;
  explicit Buffer(int64_t bytes) {
    check(cudaMalloc(&p, (size_t)std::max<int64_t>(bytes, 16) + 16), "cudaMalloc");
  }
  ~Buffer() { cudaFree(p); }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
};

// DevFormat of a quantized tensor, or of a shape under a spec: core's layout.
inline DevFormat dev_format(const QuantizedTensor& q) { return layout_of(q); }
inline DevFormat dev_format(const std::vector<int64_t>& shape, const char* spec) {
  return make_layout(shape, parse_quantizer(spec));
}

// Device copies of a packed tensor's arrays.
struct DeviceTensor {
  DevFormat f;
  Buffer codes, scale, zero, high, index, overflow;
  explicit DeviceTensor(const DevFormat& fmt)
      : f(fmt),
        codes(fmt.codes_bytes()),
        scale(fmt.n_params() * fmt.param_size()),
        zero(fmt.n_params() * fmt.param_size()),
        high(fmt.high_bytes()),
        index(fmt.index_bytes()),
        overflow(sizeof(int)) {
    check(cudaMemset(overflow.p, 0, sizeof(int)), "cudaMemset");
  }
  DevQuant view() const {
    DevQuant q;
    q.codes = static_cast<uint8_t*>(codes.p);
    q.scale = scale.p;
    q.zero = f.sym ? nullptr : zero.p;
    q.high = static_cast<uint8_t*>(high.p);
    q.index = static_cast<uint8_t*>(index.p);
    q.overflow = static_cast<int*>(overflow.p);
    return q;
  }
};

inline void params_up(const std::vector<float>& v, void* dst, bool half) {
  if (half) {
    std::vector<uint16_t> h(v.size());
    for (size_t i = 0; i < v.size(); ++i) h[i] = float_to_half(v[i]);
    check(cudaMemcpy(dst, h.data(), h.size() * 2, cudaMemcpyHostToDevice), "cudaMemcpy");
  } else {
    check(cudaMemcpy(dst, v.data(), v.size() * 4, cudaMemcpyHostToDevice), "cudaMemcpy");
  }
}
inline std::vector<float> params_down(const void* src, int64_t n, bool half) {
  std::vector<float> out(n);
  if (half) {
    std::vector<uint16_t> h(n);
    check(cudaMemcpy(h.data(), src, n * 2, cudaMemcpyDeviceToHost), "cudaMemcpy");
    for (int64_t i = 0; i < n; ++i) out[i] = half_to_float(h[i]);
  } else {
    check(cudaMemcpy(out.data(), src, n * 4, cudaMemcpyDeviceToHost), "cudaMemcpy");
  }
  return out;
}
template <class T>
std::vector<T> down(const void* src, int64_t n) {
  std::vector<T> out(n);
  if (n) check(cudaMemcpy(out.data(), src, n * sizeof(T), cudaMemcpyDeviceToHost), "cudaMemcpy");
  return out;
}

// The CPU's packed tensor on the device (input of the dequantize kernels).
inline void upload(const QuantizedTensor& q, DeviceTensor& d) {
  check(cudaMemcpy(d.codes.p, q.codes.data(), q.codes.size(), cudaMemcpyHostToDevice), "cudaMemcpy");
  params_up(q.scale, d.scale.p, d.f.half_params);
  if (!d.f.sym) params_up(q.zero, d.zero.p, d.f.half_params);
  if (d.f.boost) {
    check(cudaMemcpy(d.high.p, q.high.data(), q.high.size(), cudaMemcpyHostToDevice), "cudaMemcpy");
    check(cudaMemcpy(d.index.p, q.boost_index.data(), q.boost_index.size(), cudaMemcpyHostToDevice),
          "cudaMemcpy");
  }
}

template <class T>
int64_t diff_bytes(const std::vector<T>& a, const std::vector<T>& b) {
  if (a.size() != b.size()) return (int64_t)std::max(a.size(), b.size()) * (int64_t)sizeof(T);
  const uint8_t* x = reinterpret_cast<const uint8_t*>(a.data());
  const uint8_t* y = reinterpret_cast<const uint8_t*>(b.data());
  int64_t m = 0;
  for (size_t i = 0; i < a.size() * sizeof(T); ++i) m += x[i] != y[i];
  return m;
}

// Every array a quantize kernel wrote, against core's quantize.
inline int64_t quantize_mismatches(const QuantizedTensor& cpu, const DeviceTensor& d) {
  const DevFormat& f = d.f;
  int64_t m = diff_bytes(cpu.codes, down<uint8_t>(d.codes.p, f.codes_bytes()));
  m += diff_bytes(cpu.scale, params_down(d.scale.p, f.n_params(), f.half_params));
  if (!f.sym) m += diff_bytes(cpu.zero, params_down(d.zero.p, f.n_params(), f.half_params));
  if (f.boost) {
    m += diff_bytes(cpu.high, down<uint8_t>(d.high.p, f.high_bytes()));
    m += diff_bytes(cpu.boost_index, down<uint8_t>(d.index.p, f.index_bytes()));
  }
  return m;
}

// Median milliseconds of `reps` runs after 3 warm-ups, CUDA events.
inline double median_ms(int reps, const std::function<void()>& f) {
  cudaEvent_t a, b;
  check(cudaEventCreate(&a), "cudaEventCreate");
  check(cudaEventCreate(&b), "cudaEventCreate");
  for (int i = 0; i < 3; ++i) f();
  check(cudaDeviceSynchronize(), "warm-up");
  std::vector<float> ms(reps);
  for (int i = 0; i < reps; ++i) {
    check(cudaEventRecord(a), "cudaEventRecord");
    f();
    check(cudaEventRecord(b), "cudaEventRecord");
    check(cudaEventSynchronize(b), "cudaEventSynchronize");
    check(cudaEventElapsedTime(&ms[i], a, b), "cudaEventElapsedTime");
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  std::sort(ms.begin(), ms.end());
  return ms[reps / 2];
}

// cudaMemcpy device-to-device bandwidth (read + write), GB/s, for the "of copy" column.
inline double copy_gbps(int reps) {
  const int64_t bytes = int64_t(1) << 30;
  Buffer a(bytes), b(bytes);
  check(cudaMemset(a.p, 1, bytes), "cudaMemset");
  const double ms =
      median_ms(reps, [&] { check(cudaMemcpyAsync(b.p, a.p, bytes, cudaMemcpyDeviceToDevice), "copy"); });
  return 2.0 * (double)bytes / (ms * 1e6);
}

inline int64_t packed_total(const DevFormat& f) {
  return f.codes_bytes() + f.high_bytes() + f.index_bytes() +
         f.n_params() * f.param_size() * (f.has_zero() ? 2 : 1);
}

inline void print_bench_header() {
  std::printf("%-8s %-72s %-8s %9s %8s %7s\n", "kernel", "format", "dtype", "ms", "GB/s", "of copy");
}
inline void print_bench_row(int kernel, const std::string& format, const char* dtype, double bytes, double ms,
                            double copy) {
  const double gbps = bytes / (ms * 1e6);
  std::printf("%-8d %-72s %-8s %9.4f %8.0f %6.1f%%\n", kernel, format.c_str(), dtype, ms, gbps,
              100.0 * gbps / copy);
}

// fp16 and fp32 copies of test data on the device.
struct DeviceInputs {
  HostData host;
  Buffer x16, x32;
  DeviceInputs(const std::vector<int64_t>& shape, uint64_t seed)
      : host(make_data(shape, seed)), x16(numel(shape) * 2), x32(numel(shape) * 4) {
    check(cudaMemcpy(x16.p, host.f16.data(), host.f16.size() * 2, cudaMemcpyHostToDevice), "cudaMemcpy");
    check(cudaMemcpy(x32.p, host.f32.data(), host.f32.size() * 4, cudaMemcpyHostToDevice), "cudaMemcpy");
  }
  // Runs run(x) with the device input of the chosen dtype (const uint16_t* or const float*).
  template <class Run>
  void with_input(bool half, Run&& run) const {
    if (half)
      run(static_cast<const uint16_t*>(x16.p));
    else
      run(static_cast<const float*>(x32.p));
  }
};

// The quantize kernels 1..kernels of an exploration file against core's quantize, byte for
// byte, on every shape, spec and input dtype. run(k, format, x, quant) launches kernel k.
template <class Run>
int64_t validate_quantize(const std::vector<std::vector<int64_t>>& shapes,
                          const std::vector<const char*>& specs, int kernels, uint64_t seed, Run run) {
  int64_t bad = 0;
  for (const std::vector<int64_t>& shape : shapes) {
    const DeviceInputs in(shape, seed);
    for (const char* s : specs)
      for (bool half : {true, false}) {
        const TensorView x = half ? TensorView{in.host.f16.data(), DType::F16, shape}
                                  : TensorView{in.host.f32.data(), DType::F32, shape};
        const QuantizedTensor cpu = kvlab::quantize(x, parse_quantizer(s));
        for (int k = 1; k <= kernels; ++k) {
          DeviceTensor t(dev_format(cpu));
          in.with_input(half, [&](const auto* dx) { run(k, t.f, dx, t.view()); });
          check(cudaDeviceSynchronize(), "quantize");
          const int64_t m = quantize_mismatches(cpu, t);
          std::printf("validate kernel %d %-82s %s in %s: %lld mismatching bytes\n", k, s,
                      half ? "f16" : "f32", shape_string(shape).c_str(), (long long)m);
          bad += m;
        }
      }
  }
  return bad;
}

// The quantize kernels 1..kernels timed side by side on a (elements / 2^19, 4096, 128) tensor.
template <class Run>
void bench_quantize(const Options& o, const std::vector<const char*>& specs, int kernels, Run run) {
  const double copy = copy_gbps(o.reps);
  std::printf("cudaMemcpy D2D: %.0f GB/s\n", copy);
  print_bench_header();
  const std::vector<int64_t> shape{std::max<int64_t>(1, o.elements / (4096 * 128)), 4096, 128};
  const DeviceInputs in(shape, 3);
  for (const char* s : specs) {
    DeviceTensor t(dev_format(shape, s));
    const double packed = (double)packed_total(t.f);
    for (int k = 1; k <= kernels; ++k)
      for (bool half : {true, false}) {
        const double ms = median_ms(
            o.reps, [&] { in.with_input(half, [&](const auto* dx) { run(k, t.f, dx, t.view()); }); });
        print_bench_row(k, s, half ? "f16 in" : "f32 in", (double)numel(shape) * (half ? 2 : 4) + packed, ms,
                        copy);
      }
  }
}

// Every exploration file's main: --validate (exit 1 on any mismatching byte), then --bench.
template <class Validate, class Bench>
int run_main(int argc, char** argv, const char* usage, Validate validate_all, Bench bench_all) {
  const Options o = parse_options(argc, argv, usage);
  int status = 0;
  if (o.validate) {
    const int64_t bad = validate_all();
    std::printf("validate: %lld mismatching bytes\n", (long long)bad);
    if (bad) status = 1;
  }
  if (o.bench) bench_all(o);
  return status;
}

}  // namespace kvlab::gpu::dev
