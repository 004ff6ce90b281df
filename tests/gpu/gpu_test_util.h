// Shared bits of the GPU tests: skip without a device, compare GPU and CPU byte for byte.
#pragma once
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "kvlab_gpu/gpu.h"

#define KVLAB_REQUIRE_GPU()                                         \
  do {                                                              \
    const std::string why = kvlab::gpu::device_problem();           \
    if (!why.empty()) GTEST_SKIP() << why << " (GPU test skipped)"; \
  } while (0)

namespace kvlab::gpu::test {

// Kernel variants to check (kKernelVariants names or former preset names): all, or the comma
// list in KVLAB_GPU_TEST_PRESETS (scripts/gpu_check.sh narrows it under compute-sanitizer).
inline std::vector<std::string> test_presets() {
  std::vector<std::string> out;
  const char* e = std::getenv("KVLAB_GPU_TEST_PRESETS");
  if (!e || !*e) return out;
  std::string s = e;
  for (size_t p = 0; p <= s.size();) {
    const size_t q = std::min(s.find(',', p), s.size());
    if (q > p) out.push_back(s.substr(p, q - p));
    p = q + 1;
  }
  return out;
}

// Validation rows of the small data sets (no llama3 size) whose format contains `needle`.
inline std::vector<ValidationRow> rows_with(const std::string& needle) {
  ValidateOptions o;
  o.small = true;
  o.only = needle;
  o.presets = test_presets();
  std::vector<ValidationRow> out;
  for (auto& r : validate(o))
    if (r.format.find(needle) != std::string::npos) out.push_back(r);
  return out;
}

inline void expect_exact(const std::vector<ValidationRow>& rows) {
  ASSERT_FALSE(rows.empty());
  for (const auto& r : rows)
    EXPECT_EQ(r.mismatches, 0) << r.data << " " << r.format << " " << r.input << " (" << r.variant << ") "
                               << r.note;
}

}  // namespace kvlab::gpu::test
