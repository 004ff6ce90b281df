// The device arithmetic behind the v4 kernels (gpu/src/fastq.cuh) against the recipe's:
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

TEST(GpuFastq, EveryPresetMatchesCpu) {
  KVLAB_REQUIRE_GPU();
  for (const std::string& p : kvlab::gpu::kernel_presets()) {
    kvlab::gpu::ValidateOptions o;
    o.small = true;
    o.presets = {p};
    const auto rows = kvlab::gpu::validate(o);
    ASSERT_FALSE(rows.empty());
    for (const auto& r : rows)
      EXPECT_EQ(r.mismatches, 0) << p << ": " << r.data << " " << r.format << " " << r.input << " ("
                                 << r.variant << ") " << r.note;
  }
}
