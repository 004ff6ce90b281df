// Plain per-channel formats (asym 2/3/4/8 bits, sym INT8; tile and two-pass kernels) vs the CPU.
#include "gpu_test_util.h"

TEST(GpuChannel, MatchesCpuByteForByte) {
  KVLAB_REQUIRE_GPU();
  auto rows = kvlab::gpu::test::rows_with("axis=channel");
  std::erase_if(rows, [](const auto& r) { return r.format.find("boost") != std::string::npos; });
  kvlab::gpu::test::expect_exact(rows);
}

TEST(GpuChannel, SingleSpecRoundTrip) {
  KVLAB_REQUIRE_GPU();
  std::vector<float> x(3 * 40 * 16);
  for (size_t i = 0; i < x.size(); ++i) x[i] = (float)((int)(i * 37 % 23) - 11) * 0.5f;
  const kvlab::TensorView v{x.data(), kvlab::DType::F32, {3, 40, 16}};
  const auto spec = kvlab::parse_quantizer("scheme=asym,bits=4,axis=channel,group=8,params=fp16");
  const auto cpu = kvlab::quantize(v, spec);
  const auto gpu = kvlab::gpu::quantize(v, spec);
  EXPECT_EQ(cpu.codes, gpu.codes);
  EXPECT_EQ(cpu.scale, gpu.scale);
  EXPECT_EQ(cpu.zero, gpu.zero);
  EXPECT_EQ(kvlab::dequantize_half(cpu), kvlab::gpu::dequantize_half(cpu));
}
