// `validate`: every GPU kernel against core's CPU reference (kvlab::quantize, dequantize,
// dequantize_half, unpack_codes), byte for byte, on random, llama3-shaped and adversarial data.
#include <cmath>
#include <cstring>
#include <functional>
#include <stdexcept>

#include "kvlab/formats.h"
#include "kvlab/half.h"
#include "kvlab/hash.h"
#include "kvlab_gpu/gpu.h"
#include "util.h"

namespace kvlab::gpu {
namespace {

double uniform(uint64_t seed, int64_t i) {
  return (double)(murmur3_fmix64(seed * kGoldenGamma + (uint64_t)i) >> 11) * 0x1.0p-53;
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
        const uint64_t h = murmur3_fmix64(seed + (uint64_t)i * 0x9e37ull);
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

// The CPU reference of one input, computed once for every kernel variant.
struct Reference {
  QuantizedTensor q;
  std::string error;  // the CPU's std::invalid_argument, if it rejects the input
  std::vector<float> f32;
  std::vector<uint16_t> f16;
  std::vector<uint8_t> codes;
};

Reference cpu_reference(const TensorView& x, const QuantizerSpec& spec) {
  Reference r;
  try {
    r.q = kvlab::quantize(x, spec);
  } catch (const std::invalid_argument& e) {
    r.error = e.what();
    return r;
  }
  r.f32 = kvlab::dequantize(r.q);
  r.f16 = kvlab::dequantize_half(r.q);
  r.codes = kvlab::unpack_codes(r.q);
  return r;
}

// Rejections: both sides must agree. True when the row is complete (one side rejected).
bool compare_rejections(const std::string& cpu_err, const std::string& gpu_err, ValidationRow& row) {
  if (cpu_err.empty() && gpu_err.empty()) return false;
  if (!cpu_err.empty() && !gpu_err.empty()) {
    row.note = "both reject";
  } else {
    row.mismatches = 1;
    row.note = cpu_err.empty() ? "GPU rejects: " + gpu_err : "CPU rejects, GPU accepts: " + cpu_err;
  }
  return true;
}

// Every byte of the GPU's packed tensor, and of its unpack + dequantize of the CPU's packed
// tensor, against the reference.
void compare_bytes(const Reference& ref, const QuantizedTensor& gq, const KernelConfig& cfg,
                   ValidationRow& row) {
  auto add = [&](int64_t bytes, int64_t mism) {
    row.bytes += bytes;
    row.mismatches += mism;
  };
  const QuantizedTensor& cpu = ref.q;
  add((int64_t)cpu.codes.size(), diff_bytes(cpu.codes, gq.codes));
  add((int64_t)cpu.scale.size() * 4, diff_bytes(cpu.scale, gq.scale));
  add((int64_t)cpu.zero.size() * 4, diff_bytes(cpu.zero, gq.zero));
  add((int64_t)cpu.high.size(), diff_bytes(cpu.high, gq.high));
  add((int64_t)cpu.boost_index.size(), diff_bytes(cpu.boost_index, gq.boost_index));
  const std::vector<float> g32 = gpu::dequantize(cpu, cfg);
  add((int64_t)ref.f32.size() * 4, diff_bytes(ref.f32, g32));
  for (size_t i = 0; i < ref.f32.size() && i < g32.size(); ++i)
    row.max_abs_diff = std::max(row.max_abs_diff, (double)std::fabs(ref.f32[i] - g32[i]));
  const std::vector<uint16_t> g16 = gpu::dequantize_half(cpu, cfg);
  add((int64_t)ref.f16.size() * 2, diff_bytes(ref.f16, g16));
  const std::vector<uint8_t> gc = gpu::unpack_codes(cpu, cfg);
  add((int64_t)ref.codes.size(), diff_bytes(ref.codes, gc));
}

// One row per kernel variant: the CPU reference is computed once, the GPU side per variant.
void check(const Data& d, const QuantizerSpec& spec, bool half_in,
           const std::vector<const KernelVariant*>& variants, std::vector<ValidationRow>& rows) {
  const TensorView x =
      half_in ? TensorView{d.f16.data(), DType::F16, d.shape} : TensorView{d.f32.data(), DType::F32, d.shape};
  const Reference ref = cpu_reference(x, spec);
  for (const KernelVariant* v : variants) {
    ValidationRow row{d.name, to_string(spec), half_in ? "f16" : "f32", "", numel(d.shape), 0, 0, 0.0, ""};
    QuantizedTensor gq;
    std::string gpu_err;
    try {
      gq = gpu::quantize(x, spec, v->config, &row.variant);
    } catch (const std::invalid_argument& e) {
      gpu_err = e.what();
    }
    row.variant = std::string(v->name) + ":" + row.variant;
    if (!compare_rejections(ref.error, gpu_err, row)) compare_bytes(ref, gq, v->config, row);
    rows.push_back(row);
  }
}

// A float format (kFloatFormats): the GPU's scales, codes and block scales against the CPU's,
// then the GPU's dequantize (f32, f16) of the CPU's packed tensor. calibrated: scales given (the
// CPU's 99.9th-percentile scales, so the largest values saturate) instead of dynamic ones.
void check_float(const Data& d, const FloatSpec& spec, bool half_in, bool calibrated,
                 std::vector<ValidationRow>& rows, const KernelVariant& kv = kKernelVariants[0]) {
  const TensorView x =
      half_in ? TensorView{d.f16.data(), DType::F16, d.shape} : TensorView{d.f32.data(), DType::F32, d.shape};
  ValidationRow row{d.name,
                    to_string(spec) + (calibrated ? ",calib=p99.9" : ""),
                    half_in ? "f16" : "f32",
                    "",
                    numel(d.shape),
                    0,
                    0,
                    0.0,
                    ""};
  std::string cpu_err, gpu_err;
  FloatQuantized cq, gq;
  std::vector<float> scales;
  try {
    scales = calibrated ? kvlab::float_scales(x, spec, {99.9}) : std::vector<float>{};
    cq = calibrated ? kvlab::quantize_float(x, spec, scales) : kvlab::quantize_float(x, spec);
  } catch (const std::invalid_argument& e) {
    cpu_err = e.what();
  }
  try {
    gq = calibrated ? gpu::quantize_float(x, spec, scales, &row.variant, kv.config)
                    : gpu::quantize_float(x, spec, &row.variant, kv.config);
  } catch (const std::invalid_argument& e) {
    gpu_err = e.what();
  }
  row.variant = "float:" + row.variant + (&kv == &kKernelVariants[0] ? "" : std::string("/") + kv.name);
  if (!compare_rejections(cpu_err, gpu_err, row)) {
    auto add = [&](int64_t bytes, int64_t mism) {
      row.bytes += bytes;
      row.mismatches += mism;
    };
    add((int64_t)cq.codes.size(), diff_bytes(cq.codes, gq.codes));
    add((int64_t)cq.scale.size() * 4, diff_bytes(cq.scale, gq.scale));
    add((int64_t)cq.block_scale.size(), diff_bytes(cq.block_scale, gq.block_scale));
    const std::vector<float> r32 = kvlab::dequantize_float(cq), g32 = gpu::dequantize_float(cq);
    add((int64_t)r32.size() * 4, diff_bytes(r32, g32));
    for (size_t i = 0; i < r32.size() && i < g32.size(); ++i)
      row.max_abs_diff = std::max(row.max_abs_diff, (double)std::fabs(r32[i] - g32[i]));
    const std::vector<uint16_t> r16 = kvlab::dequantize_float_half(cq), g16 = gpu::dequantize_float_half(cq);
    add((int64_t)r16.size() * 2, diff_bytes(r16, g16));
  }
  rows.push_back(row);
}

bool format_selected(const FormatEntry& e, const std::string& only) {
  return only.empty() || std::string(e.name).find(only) != std::string::npos ||
         std::string(e.spec).find(only) != std::string::npos;
}

ValidationRow arith_row(const char* name, const char* what, ArithCheck c) {
  ValidationRow r{name, what, "-", "device", c.checked, c.checked, c.mismatches, 0.0, ""};
  return r;
}

}  // namespace

namespace {

std::vector<Data> validation_data(const ValidateOptions& opt) {
  std::vector<Data> data;
  data.push_back(make(
      "random", {2, 3, 300, 128},
      [&](int64_t, int64_t, int64_t, int64_t i) { return (float)(uniform(opt.seed, i) * 8.0 - 4.0); },
      false));
  data.push_back(adversarial("adversarial", {2, 2, 77, 72}, opt.seed));
  data.push_back(adversarial("adversarial-odd", {1, 3, 45, 50}, opt.seed + 1));
  // T = 368 = 23 * 16: the register-tile kernels' shapes with a short last group / page (112 of
  // 128 tokens, 16 of 32) and a regs-2pass whole-axis group whose token lanes are not a power
  // of two.
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
  return data;
}

// The device's fp16 conversions and fastq.cuh's shortcuts, proven on the device.
void arithmetic_rows(const ValidateOptions& opt, std::vector<ValidationRow>& rows) {
  // hardware cvt against half.h's integer reference
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
  // Markstein quotient vs __fdiv_rn, and hardware min/max vs the total order
  if (opt.exhaustive_div)
    rows.push_back(arith_row("exhaustive", "fastdiv:all-2^23-scales-x-all-2^23-numerators+2^30-edge-codes",
                             check_fast_division(0)));
  else
    rows.push_back(arith_row("fastdiv", "fastdiv:all-2^23-scales-x-2^16-numerators+2^26-edge-codes",
                             check_fast_division(1u << 16)));
  rows.push_back(
      arith_row("minmax", "HMNMX2:all-half-pairs,FMNMX:signed-zeros+2^28-random-pairs", check_hw_minmax()));
  rows.push_back(arith_row("exhaustive",
                           "fp8-cvt:hw-vs-soft,e4m3+e5m2,all-65536-halves(f32+f16x2)+all-2^32-floats+256-"
                           "codes+2^16-code-pairs,no-NaN",
                           check_fp8_conversion()));
  rows.push_back(arith_row(
      "exhaustive",
      "fp4-code:fast-vs-recipe,all-2^32-floats+mx-255-scales-x-2^16+nv-2^30-random-pairs+decode-all-2^16-"
      "code-quads,no-NaN",
      check_fp4_code()));
}

}  // namespace

std::vector<ValidationRow> validate(const ValidateOptions& opt) {
  const std::vector<const KernelVariant*> variants = select_kernel_variants(opt.presets);
  std::vector<ValidationRow> rows;
  if (!opt.small) arithmetic_rows(opt, rows);
  if (opt.arith_only) return rows;
  const std::vector<Data> data = validation_data(opt);
  for (const FormatEntry& e : kFormats) {  // formats without GPU kernels: one visible row each
    if (e.gpu || !format_selected(e, opt.only)) continue;
    rows.push_back({"-", to_string(parse_quantizer(e.spec)), "-", "-", 0, 0, 0, 0.0,
                    std::string("CPU only: no GPU kernels (") + e.name + ")"});
  }
  for (const Data& d : data)
    for (const FormatEntry& e : kFormats) {
      if (!e.gpu || !format_selected(e, opt.only)) continue;
      const QuantizerSpec spec = parse_quantizer(e.spec);
      const int64_t L = spec.axis == Axis::Channel ? d.shape[d.shape.size() - 2] : d.shape.back();
      if (spec.group > L) continue;  // group larger than this shape's axis: not a case
      for (bool half_in : {true, false}) check(d, spec, half_in, variants, rows);
    }
  for (const FormatEntry& e : kFloatFormats) {  // scaled float formats: FP4 has ieee-div
    if (!format_selected(e, opt.only)) continue;
    const FloatSpec spec = parse_float_spec(e.spec);
    if (!e.gpu) {
      rows.push_back(
          {"-", e.spec, "-", "-", 0, 0, 0, 0.0, std::string("CPU only: no GPU kernels (") + e.name + ")"});
      continue;
    }
    for (const Data& d : data)
      for (bool half_in : {true, false}) {
        if (spec.fp8()) {
          check_float(d, spec, half_in, false, rows);
          check_float(d, spec, half_in, true, rows);
          continue;
        }
        // FP4: every selected variant whose quantize differs in the division (fast_div)
        for (const KernelVariant* v : variants)
          if (v == &kKernelVariants[0] || !v->config.fast_div) check_float(d, spec, half_in, false, rows, *v);
      }
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
  std::fprintf(out, "%-16s %-70s %-3s %-28s %10s %12s %10s %10s  %s\n", "data", "format", "in", "kernel",
               "elements", "bytes", "mismatch", "max|diff|", "note");
  int64_t bad = 0;
  for (const auto& r : rows) {
    std::fprintf(out, "%-16s %-70s %-3s %-28s %10lld %12lld %10lld %10.3g  %s\n", r.data.c_str(),
                 r.format.c_str(), r.input.c_str(), r.variant.c_str(), (long long)r.elements,
                 (long long)r.bytes, (long long)r.mismatches, r.max_abs_diff, r.note.c_str());
    bad += r.mismatches;
  }
  std::fprintf(out, "validate: %zu cases, %lld mismatching bytes\n", rows.size(), (long long)bad);
}

}  // namespace kvlab::gpu
