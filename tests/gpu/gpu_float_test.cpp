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

// The dynamic-scale pass reads 16-byte vectors and leaves a slice's elements before its first
// 16-byte boundary and after its last whole vector to scalar loads; the FP8 dequantize stores
// whole 16-byte units with D / E lanes per row. Shapes whose slices are shorter than a vector,
// start off the vector grid or have D / E lanes that do not divide 256, with the largest
// magnitude of each slice put in its first or last element (a missed edge changes the scale).
TEST(GpuFloat, OddSlicesMatchCpuByteForByte) {
  KVLAB_REQUIRE_GPU();
  kvlab::gpu::ValidateOptions o;
  o.small = true;
  o.only = "fmt=";
  const std::vector<std::vector<int64_t>> shapes{
      {3, 1, 3}, {3, 5, 12}, {3, 13, 20}, {2, 301, 6}, {2, 3, 40, 72}};
  for (size_t k = 0; k < shapes.size(); ++k) {
    const std::vector<int64_t>& shape = shapes[k];
    const int64_t len = shape[shape.size() - 2] * shape.back(), n = kvlab::numel(shape);
    kvlab::gpu::NamedData d{"odd-" + std::to_string(k), shape, std::vector<float>(n)};
    for (int64_t i = 0; i < n; ++i) d.values[i] = (float)((int64_t)((i * 2654435761u) % 1000) - 500) / 128.0f;
    for (int64_t s = 0; s < n / len; ++s) d.values[s * len + (s % 2 ? 0 : len - 1)] = s % 3 ? 9.5f : -9.75f;
    o.extra.push_back(d);
  }
  std::vector<kvlab::gpu::ValidationRow> rows;
  for (auto& r : kvlab::gpu::validate(o))
    if (r.data.rfind("odd-", 0) == 0) rows.push_back(r);
  // per data set: 5 FP8 entries x f16/f32 in x dynamic/calibrated, 2 FP4 entries x f16/f32 in
  EXPECT_GE(rows.size(), o.extra.size() * (5 * 2 * 2 + 2 * 2));
  kvlab::gpu::test::expect_exact(rows);
}
