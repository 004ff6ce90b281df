// The device arithmetic behind the register-tile kernels (gpu/src/fastq.cuh) against the recipe's:
// the reciprocal + Markstein quotient against __fdiv_rn (a strided sample of the exhaustive
// sweep that `kvlab-gpu validate --exhaustive-div` runs in full, plus random edge cases through
// the whole code step), and the hardware min/max against hd.h's total order.
#include "gpu_test_util.h"

TEST(GpuFastq, MarksteinQuotientEqualsIeeeDivision) {
  KVLAB_REQUIRE_GPU();
  // every 64th scale significand x 4096 numerators: 2^29 divisions, plus 2^22 edge cases
  const kvlab::gpu::ArithCheck c = kvlab::gpu::check_fast_division(4096, 64);
  EXPECT_GT(c.checked, int64_t(1) << 29);
  EXPECT_EQ(c.mismatches, 0);
}

TEST(GpuFastq, HardwareMinMaxIsTheTotalOrder) {
  KVLAB_REQUIRE_GPU();
  const kvlab::gpu::ArithCheck c = kvlab::gpu::check_hw_minmax();
  EXPECT_GT(c.checked, int64_t(1) << 33);
  EXPECT_EQ(c.mismatches, 0);
}

// Every entry of the variant table (kvlab_gpu/kernel_config.h) on the small data.
TEST(GpuFastq, EveryKernelVariantMatchesCpu) {
  KVLAB_REQUIRE_GPU();
  for (const kvlab::gpu::KernelVariant& v : kvlab::gpu::kKernelVariants) {
    kvlab::gpu::ValidateOptions o;
    o.small = true;
    o.presets = {v.name};
    const auto rows = kvlab::gpu::validate(o);
    ASSERT_FALSE(rows.empty());
    for (const auto& r : rows)
      EXPECT_EQ(r.mismatches, 0) << v.name << ": " << r.data << " " << r.format << " " << r.input << " ("
                                 << r.variant << ") " << r.note;
  }
}

// The table's names and former names resolve to their own entries; retired names say where
// their kernels went.
TEST(GpuFastq, KernelVariantNamesAndAliases) {
  for (const kvlab::gpu::KernelVariant& v : kvlab::gpu::kKernelVariants) {
    EXPECT_EQ(&kvlab::gpu::find_kernel_variant(v.name), &v);
    EXPECT_EQ(&kvlab::gpu::find_kernel_variant(v.alias), &v);
  }
  EXPECT_STREQ(kvlab::gpu::kKernelVariants[0].name, "default");
  EXPECT_THROW(kvlab::gpu::find_kernel_variant("v4-alt"), std::invalid_argument);
  EXPECT_THROW(kvlab::gpu::find_kernel_variant("nope"), std::invalid_argument);
}
