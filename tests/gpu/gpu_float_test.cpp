// The scaled floating-point formats (FP8 with the hardware conversion, NVFP4, MXFP4) vs the CPU,
// and the proofs behind FP8 (the hardware cvt equals minifloat.h's integer code) and FP4 (the
// fast code step equals the recipe).
#include "gpu_test_util.h"

TEST(GpuFloat, HardwareFp8ConversionEqualsTheSoftCode) {
  KVLAB_REQUIRE_GPU();
  const kvlab::gpu::ArithCheck c = kvlab::gpu::check_fp8_conversion();
  EXPECT_GT(c.checked, int64_t(2) * ((int64_t(1) << 32) - (int64_t(1) << 24)));  // all floats but NaN, twice
  EXPECT_EQ(c.mismatches, 0);
}

TEST(GpuFloat, EveryFloatFormatMatchesCpuByteForByte) {
  KVLAB_REQUIRE_GPU();
  for (const char* fmt : {"fmt=e4m3", "fmt=e5m2", "fmt=nvfp4", "fmt=mxfp4"})
    kvlab::gpu::test::expect_exact(kvlab::gpu::test::rows_with(fmt));
}

TEST(GpuFloat, Fp4FastCodeEqualsTheRecipe) {
  KVLAB_REQUIRE_GPU();
  const kvlab::gpu::ArithCheck c = kvlab::gpu::check_fp4_code();
  EXPECT_GT(c.checked,
            (int64_t(1) << 32) - (int64_t(1) << 24) + (int64_t(1) << 30));  // every float, 2^30 pairs
  EXPECT_EQ(c.mismatches, 0);
}
