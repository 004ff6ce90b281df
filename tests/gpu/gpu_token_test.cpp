// Plain per-token formats (asym 2/4/8 bits, sym INT8) vs the CPU.
#include "gpu_test_util.h"

TEST(GpuToken, MatchesCpuByteForByte) {
  KVLAB_REQUIRE_GPU();
  kvlab::gpu::test::expect_exact(kvlab::gpu::test::rows_with("axis=token"));
}
