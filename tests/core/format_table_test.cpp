// core's format table (kvlab/formats.h): unique names, canonical specs, GPU marks only where
// kernels exist (the kvlab profile), and every benchmarked format also validated.
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "kvlab/float_quant.h"
#include "kvlab/formats.h"
#include "kvlab/quantizer.h"

namespace {

using namespace kvlab;

TEST(FormatTable, NamesUniqueSpecsCanonical) {
  std::set<std::string> names, specs;
  for (const FormatEntry& e : kFormats) {
    SCOPED_TRACE(e.name);
    EXPECT_TRUE(names.insert(e.name).second) << "duplicate name";
    EXPECT_TRUE(specs.insert(e.spec).second) << "duplicate spec";
    const QuantizerSpec s = parse_quantizer(e.spec);
    EXPECT_EQ(to_string(s), e.spec) << "spec is not in canonical form";
  }
}

TEST(FormatTable, GpuOnlyForTheKvlabProfileAndBenchOnlyOnGpu) {
  for (const FormatEntry& e : kFormats) {
    SCOPED_TRACE(e.name);
    const QuantizerSpec s = parse_quantizer(e.spec);
    EXPECT_TRUE(!e.gpu || s.profile == Profile::Kvlab) << "GPU kernels exist for the kvlab profile only";
    EXPECT_TRUE(!e.bench || e.gpu) << "a benchmarked format must have GPU kernels";
  }
}

TEST(FormatTable, FloatFormatsUniqueCanonicalAndNotInTheOtherTable) {
  std::set<std::string> names;
  for (const FormatEntry& e : kFormats) names.insert(e.name);
  for (const FormatEntry& e : kFloatFormats) {
    SCOPED_TRACE(e.name);
    EXPECT_TRUE(names.insert(e.name).second) << "duplicate name";
    EXPECT_EQ(to_string(parse_float_spec(e.spec)), e.spec) << "spec is not in canonical form";
    EXPECT_TRUE(!e.bench || e.gpu) << "a benchmarked format must have GPU kernels";
  }
}

}  // namespace
