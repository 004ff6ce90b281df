// `validate`: every GPU kernel against core's CPU reference (kvlab::quantize, dequantize,
// dequantize_half, unpack_codes), byte for byte, on random, llama3-shaped and adversarial data.
#include <cmath>
#include <cstring>
#include <functional>
#include <stdexcept>

#include "kvlab/half.h"
#include "kvlab_gpu/gpu.h"
#include "util.h"

namespace kvlab::gpu {
namespace {

uint64_t mix(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ull;
  x ^= x >> 33;
  return x;
}
double uniform(uint64_t seed, int64_t i) {
  return (double)(mix(seed * 0x9e3779b97f4a7c15ull + (uint64_t)i) >> 11) * 0x1.0p-53;
}
double gauss(uint64_t seed, int64_t i) {
  const double u1 = std::max(uniform(seed, 2 * i), 1e-300), u2 = uniform(seed ^ 0x55, 2 * i + 1);
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
}

struct Data {
  std::string name;
  std::vector<int64_t> shape;
  std::vector<float> f32;     // fp32 input
  std::vector<uint16_t> f16;  // fp16 input (bits)
};

Data make(std::string name, std::vector<int64_t> shape,
          const std::function<float(int64_t, int64_t, int64_t, int64_t)>& gen, bool f32_exact_half) {
  Data d{std::move(name), shape, {}, {}};
  const int64_t T = shape[shape.size() - 2], D = shape.back(), n = numel(shape);
  d.f32.resize(n);
  d.f16.resize(n);
  for (int64_t i = 0; i < n; ++i) {
    const float v = gen(i / (T * D), (i / D) % T, i % D, i);
    d.f16[i] = float_to_half(v);
    d.f32[i] = f32_exact_half ? half_to_float(d.f16[i]) : v;
  }
  return d;
}

// llama3-8b-shaped synthetic cache: keys with outlier channels and RoPE-like rotation; values
// close to Gaussian per token. (Our own simple generator: GPU-only builds have no datasets/.)
Data llama_keys(uint64_t seed) {
  return make(
      "llama3-k", {1, 8, 4096, 128},
      [seed](int64_t n, int64_t t, int64_t c, int64_t i) {
        const int64_t pair = c / 2;
        const double freq = std::pow(500000.0, -2.0 * pair / 128.0);
        const double mag = (c % 32 == 5 || c % 32 == 6) ? 8.0 + 2.0 * (double)n : 1.0;
        const double ang = (double)t * freq + (double)n;
        const double base =
            mag * (c % 2 ? std::sin(ang) : std::cos(ang)) * (0.75 + 0.25 * uniform(seed, pair + 64 * n));
        return (float)(base + 0.3 * gauss(seed + 7, i));
      },
      false);
}
Data llama_values(uint64_t seed) {
  return make(
      "llama3-v", {1, 8, 4096, 128},
      [seed](int64_t, int64_t t, int64_t, int64_t i) {
        return (float)((0.5 + 0.5 * uniform(seed + 3, t)) * gauss(seed + 11, i));
      },
      false);
}

// Exact .5 ties, constant groups, fp16 subnormals, +-65504, mixed signs, signed zeros; every
// value fp16-representable, so the fp16 and fp32 inputs hold the same numbers.
Data adversarial(std::string name, std::vector<int64_t> shape, uint64_t seed) {
  return make(
      std::move(name), std::move(shape),
      [seed](int64_t n, int64_t t, int64_t c, int64_t i) {
        if (t % 13 == 5) return 2.0f;  // constant token rows (per-token groups)
        const uint64_t h = mix(seed + (uint64_t)i * 0x9e37ull);
        switch ((c + n) % 9) {
          case 0: return (float)(uniform(seed, i) * 8.0 - 4.0);
          case 1: return 0.5f * (float)(h % 7);  // grid 0..3 in halves: exact .5 ties
          case 2: return 1.25f;                  // constant channel
          case 3:
            return (float)((int)(h % 9) - 4) * 5.9604644775390625e-8f * (float)(1 + h % 3);  // subnormals
          case 4: {
            const float e[4] = {65504.0f, -65504.0f, 0.0f, -0.0f};
            return e[h % 4];
          }
          case 5: return (float)((int)(h % 21) - 10) * 0.25f;  // mixed signs, exact steps
          case 6: return (h & 1) ? -0.0f : 0.0f;               // signed zeros only
          case 7: return (float)(uniform(seed, i) * 2000.0 - 1000.0);
          default: return (float)((int)(h % 3) - 1) * 0.5f;  // ties with signed steps
        }
      },
      true);
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

const char* kFormats[] = {
    "scheme=sym,bits=8,axis=channel,group=all,params=fp32",
    "scheme=sym,bits=8,axis=channel,group=32,params=fp16",
    "scheme=asym,bits=2,axis=channel,group=32,params=fp16",
    "scheme=asym,bits=4,axis=channel,group=32,params=fp32",
    "scheme=asym,bits=8,axis=channel,group=all,params=fp16",
    "scheme=asym,bits=2,axis=channel,group=128,params=fp16",
    "scheme=asym,bits=4,axis=channel,group=128,params=fp32",
    "scheme=asym,bits=3,axis=channel,group=all,params=fp32",
    "scheme=asym,bits=2,axis=token,group=32,params=fp16",
    "scheme=asym,bits=4,axis=token,group=all,params=fp32",
    "scheme=asym,bits=8,axis=token,group=32,params=fp16",
    "scheme=sym,bits=8,axis=token,group=all,params=fp32",
    "scheme=asym,bits=2,axis=token,group=128,params=fp16",
    "scheme=asym,bits=2,axis=channel,group=32,params=fp16,profile=kvlab,boost=0.125",
    "scheme=asym,bits=4,axis=channel,group=32,params=fp32,profile=kvlab,boost=0.25",
    "scheme=asym,bits=2,axis=channel,group=128,params=fp16,profile=kvlab,boost=0.125",
};

// One row per kernel preset: the CPU reference is computed once, the GPU side per preset.
void check(const Data& d, const QuantizerSpec& spec, bool half_in, const std::vector<std::string>& presets,
           std::vector<ValidationRow>& rows) {
  const TensorView x =
      half_in ? TensorView{d.f16.data(), DType::F16, d.shape} : TensorView{d.f32.data(), DType::F32, d.shape};
  QuantizedTensor cpu;
  std::string cpu_err;
  try {
    cpu = kvlab::quantize(x, spec);
  } catch (const std::invalid_argument& e) {
    cpu_err = e.what();
  }
  std::vector<float> r32;
  std::vector<uint16_t> r16;
  std::vector<uint8_t> rc;
  if (cpu_err.empty())
    r32 = kvlab::dequantize(cpu), r16 = kvlab::dequantize_half(cpu), rc = kvlab::unpack_codes(cpu);
  for (const std::string& preset : presets) {
    use_kernel_preset(preset);
    ValidationRow row{d.name, to_string(spec), half_in ? "f16" : "f32", "", numel(d.shape), 0, 0, 0.0, ""};
    QuantizedTensor gq;
    std::string gpu_err;
    try {
      gq = gpu::quantize(x, spec, &row.variant);
    } catch (const std::invalid_argument& e) {
      gpu_err = e.what();
    }
    row.variant = preset + ":" + row.variant;
    if (!cpu_err.empty() || !gpu_err.empty()) {
      if (!cpu_err.empty() && !gpu_err.empty())
        row.note = "both reject";
      else {
        row.mismatches = 1;
        row.note = cpu_err.empty() ? "GPU rejects: " + gpu_err : "CPU rejects, GPU accepts: " + cpu_err;
      }
      rows.push_back(row);
      continue;
    }
    auto add = [&](int64_t bytes, int64_t mism) {
      row.bytes += bytes;
      row.mismatches += mism;
    };
    add((int64_t)cpu.codes.size(), diff_bytes(cpu.codes, gq.codes));
    add((int64_t)cpu.scale.size() * 4, diff_bytes(cpu.scale, gq.scale));
    add((int64_t)cpu.zero.size() * 4, diff_bytes(cpu.zero, gq.zero));
    add((int64_t)cpu.high.size(), diff_bytes(cpu.high, gq.high));
    add((int64_t)cpu.boost_index.size(), diff_bytes(cpu.boost_index, gq.boost_index));
    // Unpack + dequantize on the GPU from the CPU's packed tensor.
    const std::vector<float> g32 = gpu::dequantize(cpu);
    add((int64_t)r32.size() * 4, diff_bytes(r32, g32));
    for (size_t i = 0; i < r32.size() && i < g32.size(); ++i)
      row.max_abs_diff = std::max(row.max_abs_diff, (double)std::fabs(r32[i] - g32[i]));
    const std::vector<uint16_t> g16 = gpu::dequantize_half(cpu);
    add((int64_t)r16.size() * 2, diff_bytes(r16, g16));
    const std::vector<uint8_t> gc = gpu::unpack_codes(cpu);
    add((int64_t)rc.size(), diff_bytes(rc, gc));
    rows.push_back(row);
  }
  use_kernel_preset("v4");
}

ValidationRow arith_row(const char* name, const char* what, ArithCheck c) {
  ValidationRow r{name, what, "-", "device", c.checked, c.checked, c.mismatches, 0.0, ""};
  return r;
}

}  // namespace

std::vector<ValidationRow> validate(const ValidateOptions& opt) {
  std::vector<Data> data;
  data.push_back(make(
      "random", {2, 3, 300, 128},
      [&](int64_t, int64_t, int64_t, int64_t i) { return (float)(uniform(opt.seed, i) * 8.0 - 4.0); },
      false));
  data.push_back(adversarial("adversarial", {2, 2, 77, 72}, opt.seed));
  data.push_back(adversarial("adversarial-odd", {1, 3, 45, 50}, opt.seed + 1));
  // T = 368 = 23 * 16: the v4 kernels' shapes with a short last group / page (112 of 128 tokens,
  // 16 of 32) and a v4-2pass whole-axis group whose token lanes are not a power of two.
  data.push_back(make(
      "random-368", {2, 2, 368, 128},
      [&](int64_t, int64_t, int64_t, int64_t i) { return (float)(uniform(opt.seed + 5, i) * 6.0 - 2.0); },
      false));
  data.push_back(adversarial("adversarial-368", {1, 2, 368, 128}, opt.seed + 2));
  if (!opt.small) {
    data.push_back(llama_keys(opt.seed));
    data.push_back(llama_values(opt.seed));
  }
  for (const NamedData& e : opt.extra) {
    if (e.shape.size() < 2 || numel(e.shape) != (int64_t)e.values.size())
      throw std::invalid_argument("validate: data '" + e.name + "' has shape " + shape_string(e.shape) +
                                  " but " + std::to_string(e.values.size()) + " values");
    Data d{e.name, e.shape, e.values, std::vector<uint16_t>(e.values.size())};
    for (size_t i = 0; i < e.values.size(); ++i) d.f16[i] = float_to_half(e.values[i]);
    data.push_back(std::move(d));
  }
  std::vector<ValidationRow> rows;
  if (!opt.small) {  // the device's fp16 conversions (hardware cvt) against half.h's integer reference
    ValidationRow r{"exhaustive",
                    "fp16-cvt:hw+F2FP-pack-vs-soft,all-65536-halves+all-2^32-floats(x3),no-NaN",
                    "-",
                    "cvt",
                    0,
                    0,
                    0,
                    0.0,
                    ""};
    int64_t checked = 0;
    r.mismatches = half_conversion_mismatches(&checked);
    r.elements = checked;
    r.bytes = checked;
    rows.push_back(r);
    // fastq.cuh: Markstein quotient vs __fdiv_rn, and hardware min/max vs the total order.
    if (opt.exhaustive_div)
      rows.push_back(arith_row("exhaustive", "fastdiv:all-2^23-scales-x-all-2^23-numerators+2^30-edge-codes",
                               check_fast_division(0)));
    else
      rows.push_back(arith_row("fastdiv", "fastdiv:all-2^23-scales-x-2^16-numerators+2^26-edge-codes",
                               check_fast_division(1u << 16)));
    rows.push_back(
        arith_row("minmax", "HMNMX2:all-half-pairs,FMNMX:signed-zeros+2^28-random-pairs", check_hw_minmax()));
  }
  if (opt.arith_only) return rows;
  const std::vector<std::string> presets = opt.presets.empty() ? kernel_presets() : opt.presets;
  for (const Data& d : data)
    for (const char* s : kFormats) {
      if (!opt.only.empty() && std::string(s).find(opt.only) == std::string::npos) continue;
      const QuantizerSpec spec = parse_quantizer(s);
      const int64_t L = spec.axis == Axis::Channel ? d.shape[d.shape.size() - 2] : d.shape.back();
      if (spec.group > L) continue;  // group larger than this shape's axis: not a case
      for (bool half_in : {true, false}) check(d, spec, half_in, presets, rows);
    }
  return rows;
}

ArithCheck check_fast_division(uint32_t per_scale, uint32_t scale_step) {
  ArithCheck c;
  c.mismatches = fastdiv_mismatches(per_scale, scale_step, &c.checked);
  return c;
}

ArithCheck check_hw_minmax() {
  ArithCheck c;
  c.mismatches = minmax_mismatches(&c.checked);
  return c;
}

void print_validation(const std::vector<ValidationRow>& rows, std::FILE* out) {
  std::fprintf(out, "%-16s %-70s %-3s %-16s %10s %12s %10s %10s  %s\n", "data", "format", "in", "kernel",
               "elements", "bytes", "mismatch", "max|diff|", "note");
  int64_t bad = 0;
  for (const auto& r : rows) {
    std::fprintf(out, "%-16s %-70s %-3s %-16s %10lld %12lld %10lld %10.3g  %s\n", r.data.c_str(),
                 r.format.c_str(), r.input.c_str(), r.variant.c_str(), (long long)r.elements,
                 (long long)r.bytes, (long long)r.mismatches, r.max_abs_diff, r.note.c_str());
    bad += r.mismatches;
  }
  std::fprintf(out, "validate: %zu cases, %lld mismatching bytes\n", rows.size(), (long long)bad);
}

}  // namespace kvlab::gpu
