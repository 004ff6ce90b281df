// The methods applied by gpu/'s kernels (eval_gpu's CUDA codec, kvlab/codec.h) against core on
// the CPU: K_hat and V_hat byte for byte (0 mismatching bytes), for every family with kernels,
// fp16 and fp32 inputs; specs without kernels are declined and still give core's bytes. Skips
// without a GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>

#include "kvlab/half.h"
#include "kvlab/method.h"
#include "kvlab/synthetic_dump.h"
#include "kvlab_eval_gpu/codec_gpu.h"

namespace {

using namespace kvlab;

std::shared_ptr<const Codec> open_codec() {
  try {
    return cuda_codec(0);
  } catch (const std::runtime_error& e) {
    std::printf("%s\n", e.what());
    return nullptr;
  }
}

int64_t mismatching_bytes(const Tensor& a, const Tensor& b) {
  EXPECT_EQ(a.shape, b.shape);
  if (a.data.size() != b.data.size()) return -1;
  const auto* x = reinterpret_cast<const unsigned char*>(a.data.data());
  const auto* y = reinterpret_cast<const unsigned char*>(b.data.data());
  int64_t n = 0;
  for (size_t i = 0; i < a.data.size() * sizeof(float); ++i) n += x[i] != y[i];
  return n;
}

TEST(CodecGpu, MethodsGiveCoresBytes) {
  const auto codec = open_codec();
  if (!codec) GTEST_SKIP() << "no usable CUDA device";
  SyntheticDumpParams p = synthetic_preset("llama3-8b");  // D 128, outlier channels, fp16 values
  p.layers = 1;
  p.tokens = 1024;  // T and groups multiples of 16: gpu/'s fast (radix, register-tile) kernels
  p.kv_heads = 1;
  p.q_heads = 1;
  const SyntheticDump dump(p);
  const Tensor k = dump.read(0, Role::K), v = dump.read(0, Role::V);
  std::vector<uint16_t> k16(k.data.size()), v16(v.data.size());
  for (size_t i = 0; i < k.data.size(); ++i) {
    k16[i] = float_to_half(k.data[i]);
    v16[i] = float_to_half(v.data[i]);
  }
  const std::vector<std::string> specs = {
      "fp16",
      "int8",
      "kivi-4",
      "kivi-2",
      "kivi-2-sink",
      "kitty",
      "kitty-pro",
      "fp8-e4m3",
      "fp8:scale=channel,calib=percentile:99.9",
      "nvfp4",
      "mxfp4",
      "kivi:kbits=3,vbits=3,rot=hadamard:7",  // rotated, odd bit widths
      "kivi:profile=kivi",                    // no kernel: declined, core's bytes
  };
  HeadContext gpu;
  gpu.codec = codec.get();
  for (const std::string& spec : specs) {
    const MethodPtr m = parse_method(spec);
    for (bool half : {false, true}) {
      const TensorView kv = half ? TensorView{k16.data(), DType::F16, k.shape} : k.view();
      const TensorView vv = half ? TensorView{v16.data(), DType::F16, v.shape} : v.view();
      const Reconstruction cpu = m->apply(kv, vv, HeadContext{}), dev = m->apply(kv, vv, gpu);
      EXPECT_EQ(mismatching_bytes(cpu.k, dev.k), 0) << spec << (half ? " fp16" : " fp32") << " K_hat";
      EXPECT_EQ(mismatching_bytes(cpu.v, dev.v), 0) << spec << (half ? " fp16" : " fp32") << " V_hat";
    }
  }
}

// eval applies its methods on several threads at once: every result still core's bytes (gpu/'s
// launchers share process-wide kernel attributes; the codec serializes its calls).
TEST(CodecGpu, ConcurrentMethodsGiveCoresBytes) {
  const auto codec = open_codec();
  if (!codec) GTEST_SKIP() << "no usable CUDA device";
  SyntheticDumpParams p = synthetic_preset("llama3-8b");
  p.layers = 1;
  p.tokens = 2048;
  p.kv_heads = 1;
  p.q_heads = 1;
  const SyntheticDump dump(p);
  const Tensor k = dump.read(0, Role::K), v = dump.read(0, Role::V);
  const std::vector<std::string> specs = {"kitty", "kitty-pro", "kivi-2", "kivi-4",
                                          "int8",  "fp8-e4m3",  "nvfp4"};
  HeadContext gpu;
  gpu.codec = codec.get();
  std::vector<int64_t> bad(specs.size(), -2);
#pragma omp parallel for num_threads((int)specs.size())
  for (size_t i = 0; i < specs.size(); ++i) {
    try {
      const MethodPtr m = parse_method(specs[i]);
      const Reconstruction cpu = m->apply(k.view(), v.view(), HeadContext{});
      const Reconstruction dev = m->apply(k.view(), v.view(), gpu);
      bad[i] = mismatching_bytes(cpu.k, dev.k) + mismatching_bytes(cpu.v, dev.v);
    } catch (const std::exception& e) {
      std::printf("%s: %s\n", specs[i].c_str(), e.what());
      bad[i] = -1;
    }
  }
  for (size_t i = 0; i < specs.size(); ++i) EXPECT_EQ(bad[i], 0) << specs[i];
}

TEST(CodecGpu, BadInputIsCoresError) {
  const auto codec = open_codec();
  if (!codec) GTEST_SKIP() << "no usable CUDA device";
  HeadContext gpu;
  gpu.codec = codec.get();
  std::vector<float> x(4 * 8, 1.0f);
  x[5] = NAN;
  const TensorView t{x.data(), DType::F32, {1, 4, 8}};
  EXPECT_THROW(parse_method("int8")->apply(t, t, gpu), std::invalid_argument);
}

}  // namespace
