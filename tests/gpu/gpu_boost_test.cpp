// Kitty boost pages (low plane, high plane, index, per-page params) vs the CPU.
#include "gpu_test_util.h"

TEST(GpuBoost, MatchesCpuByteForByte) {
  KVLAB_REQUIRE_GPU();
  kvlab::gpu::test::expect_exact(kvlab::gpu::test::rows_with("boost="));
}

TEST(GpuBoost, RejectsProfilesWithoutKernels) {
  KVLAB_REQUIRE_GPU();
  std::vector<float> x(64 * 8, 1.0f);
  const kvlab::TensorView v{x.data(), kvlab::DType::F32, {64, 8}};
  EXPECT_THROW(kvlab::gpu::quantize(v, kvlab::parse_quantizer("profile=kivi,bits=2,group=32")),
               std::invalid_argument);
}
