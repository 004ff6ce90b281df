// Writes every byte the core quantizers produce for a fixed battery of inputs and specs.
// Built twice (-O0, and -O3 -march=native); ctest compares the two files byte for byte.
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "kvlab/float_quant.h"
#include "kvlab/formats.h"
#include "kvlab/half.h"
#include "kvlab/quantizer.h"

namespace {

std::vector<float> battery(uint64_t seed, int64_t n, bool extremes) {
  std::mt19937_64 rng(seed);
  std::vector<float> v(n);
  for (int64_t i = 0; i < n; ++i) {
    const uint64_t r = rng();
    switch (r % 8) {
      case 0: v[i] = (float)(int64_t)(r >> 40) / 65536.0f; break;                  // many exact .5 ties
      case 1: v[i] = kvlab::half_to_float((uint16_t)((r >> 20) & 0x83ff)); break;  // fp16 subnormals
      case 2: v[i] = ((r >> 8) & 1 ? 1.0f : -1.0f) * (extremes ? 65504.0f : 4.0f); break;
      default: v[i] = kvlab::round_to_half((float)((int64_t)(r >> 33) - (1ll << 30)) / (float)(1 << 27));
    }
  }
  for (int64_t i = 0; i < 64; ++i) v[i] = 1.25f;  // a constant group
  return v;
}

template <class T>
void put(std::FILE* f, const std::vector<T>& v) {
  if (!v.empty()) std::fwrite(v.data(), sizeof(T), v.size(), f);  // an empty one's data() may be null
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s OUT\n", argv[0]);
    return 2;
  }
  std::FILE* f = std::fopen(argv[1], "wb");
  if (!f) return 1;
  const std::vector<int64_t> shape = {2, 3, 77, 24};  // T, D not multiples of the groups
  // Ranges up to 131008 overflow fp16 scales: the fp16 recipes get a milder input.
  const std::vector<float> wide = battery(7, 2 * 3 * 77 * 24, true),
                           mild = battery(7, 2 * 3 * 77 * 24, false);
  auto halves = [](const std::vector<float>& x) {
    std::vector<uint16_t> h(x.size());
    for (size_t i = 0; i < x.size(); ++i) h[i] = kvlab::float_to_half(x[i]);
    return h;
  };
  const std::vector<uint16_t> wide_h = halves(wide), mild_h = halves(mild);
  const char* specs[] = {
      "bits=2,axis=channel,group=16",
      "bits=3,axis=channel,group=5",
      "bits=4,axis=token,group=8",
      "bits=8,axis=token,group=all",
      "bits=1,axis=channel,group=32,params=fp32",
      "scheme=sym,bits=8,axis=channel",
      "scheme=sym,bits=4,axis=token,group=6",
      "bits=2,axis=channel,group=16,boost=0.125",
      "bits=3,axis=channel,group=20,boost=0.5",
      "bits=2,axis=channel,group=16,profile=kivi",
      "bits=4,axis=token,group=8,profile=kivi",
      "bits=2,axis=channel,group=16,profile=kitty-sim,boost=0.25",
      "bits=5,axis=channel,group=7,params=fp16",
  };
  for (const char* s : specs) {
    const kvlab::QuantizerSpec spec = kvlab::parse_quantizer(s);
    const bool fp16_math = spec.params == kvlab::ParamType::F16;
    const std::vector<float>& x = fp16_math ? mild : wide;
    const std::vector<uint16_t>& xh = fp16_math ? mild_h : wide_h;
    for (int dt = 0; dt < 2; ++dt) {
      kvlab::TensorView v{dt ? (const void*)xh.data() : (const void*)x.data(),
                          dt ? kvlab::DType::F16 : kvlab::DType::F32, shape};
      const kvlab::QuantizedTensor q = kvlab::quantize(v, spec);
      put(f, q.codes);
      put(f, q.scale);
      put(f, q.zero);
      put(f, q.high);
      put(f, q.boost_index);
      put(f, kvlab::unpack_codes(q));
      put(f, kvlab::dequantize(q));
      put(f, kvlab::dequantize_half(q));
    }
  }
  // the scaled float formats (vectorized encode at -O3), dynamic and 99th-percentile scales
  for (const kvlab::FormatEntry& e : kvlab::kFloatFormats) {
    const kvlab::FloatSpec spec = kvlab::parse_float_spec(e.spec);
    for (int dt = 0; dt < 2; ++dt) {
      kvlab::TensorView v{dt ? (const void*)wide_h.data() : (const void*)wide.data(),
                          dt ? kvlab::DType::F16 : kvlab::DType::F32, shape};
      for (const kvlab::FloatQuantized& q :
           {kvlab::quantize_float(v, spec),
            kvlab::quantize_float(v, spec, kvlab::float_scales(v, spec, {99.0}))}) {
        put(f, q.codes);
        put(f, q.scale);
        put(f, q.block_scale);
        put(f, kvlab::dequantize_float(q));
        put(f, kvlab::dequantize_float_half(q));
      }
    }
  }
  return std::fclose(f) == 0 ? 0 : 1;
}
