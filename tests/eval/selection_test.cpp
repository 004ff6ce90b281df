// What `kvlab eval` looks at: query positions, layer ranges, method lists, and their errors.
#include <gtest/gtest.h>

#include "kvlab/selection.h"

namespace {

using kvlab::QuerySelection;

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

TEST(Queries, ParseAndPrint) {
  EXPECT_EQ(kvlab::parse_queries("all"), QuerySelection{});
  EXPECT_EQ(kvlab::parse_queries("last:256"), (QuerySelection{QuerySelection::Mode::Last, 256}));
  EXPECT_EQ(kvlab::parse_queries("stride:8"), (QuerySelection{QuerySelection::Mode::Stride, 8}));
  for (const char* s : {"all", "last:1", "stride:64"})
    EXPECT_EQ(kvlab::to_string(kvlab::parse_queries(s)), s);
}

TEST(Queries, Positions) {
  EXPECT_EQ(kvlab::select_queries({}, 4), (std::vector<int64_t>{0, 1, 2, 3}));
  EXPECT_EQ(kvlab::select_queries(kvlab::parse_queries("last:3"), 10), (std::vector<int64_t>{7, 8, 9}));
  EXPECT_EQ(kvlab::select_queries(kvlab::parse_queries("last:10"), 10).size(), 10u);
  EXPECT_EQ(kvlab::select_queries(kvlab::parse_queries("stride:4"), 12), (std::vector<int64_t>{3, 7, 11}));
  EXPECT_EQ(kvlab::select_queries(kvlab::parse_queries("stride:4"), 10), (std::vector<int64_t>{3, 7}));
  EXPECT_EQ(kvlab::select_queries(kvlab::parse_queries("stride:1"), 3), (std::vector<int64_t>{0, 1, 2}));
}

TEST(Queries, BadInput) {
  EXPECT_NE(error_of([] { kvlab::parse_queries("first:3"); }).find("valid: all, last:N, stride:N"),
            std::string::npos);
  EXPECT_NE(error_of([] { kvlab::parse_queries("last"); }).find("needs N"), std::string::npos);
  EXPECT_NE(error_of([] { kvlab::parse_queries("last:x"); }).find("'x' is not a non-negative integer"),
            std::string::npos);
  EXPECT_NE(error_of([] { kvlab::parse_queries("last:-2"); }).find("not a non-negative integer"),
            std::string::npos);
  EXPECT_NE(error_of([] { kvlab::parse_queries("stride:0"); }).find("N must be >= 1"), std::string::npos);
  // N larger than T.
  const std::string big = error_of([] { kvlab::select_queries(kvlab::parse_queries("last:11"), 10); });
  EXPECT_NE(big.find("last:11"), std::string::npos) << big;
  EXPECT_NE(big.find("T = 10"), std::string::npos) << big;
  EXPECT_NE(error_of([] { kvlab::select_queries(kvlab::parse_queries("stride:11"), 10); }).find("T = 10"),
            std::string::npos);
}

TEST(Layers, ParseResolveAndErrors) {
  auto r = kvlab::parse_layers("3-7");
  EXPECT_EQ(r.first, 3);
  EXPECT_EQ(r.last, 7);
  r = kvlab::parse_layers("5");
  EXPECT_EQ(r.first, 5);
  EXPECT_EQ(r.last, 5);
  r = kvlab::resolve_layers({}, 32);
  EXPECT_EQ(r.first, 0);
  EXPECT_EQ(r.last, 31);
  EXPECT_NE(error_of([] { kvlab::parse_layers("7-3"); }).find("empty"), std::string::npos);
  EXPECT_NE(error_of([] { kvlab::parse_layers("a-3"); }).find("--layers 'a-3'"), std::string::npos);
  EXPECT_NE(error_of([] { kvlab::parse_layers("-3"); }).find("--layers"), std::string::npos);
  const std::string out = error_of([] { kvlab::resolve_layers(kvlab::parse_layers("30-32"), 32); });
  EXPECT_NE(out.find("out of range"), std::string::npos) << out;
  EXPECT_NE(out.find("32 layers (0-31)"), std::string::npos) << out;
  EXPECT_NE(error_of([] { kvlab::resolve_layers(kvlab::parse_layers("40"), 32); }).find("out of range"),
            std::string::npos);
}

// One strict parser for every --layers (eval, sensitivity, boost-sweep, vq train, info):
// trailing junk, lists and negatives are errors, never a silently different layer.
TEST(Layers, TrailingJunkListsAndNegativesAreErrors) {
  EXPECT_NE(error_of([] {
              kvlab::parse_layers("1,2");
            }).find("--layers '1,2': '1,2' is not a non-negative integer"),
            std::string::npos);
  EXPECT_NE(error_of([] { kvlab::parse_layers("2abc"); }).find("--layers '2abc'"), std::string::npos);
  EXPECT_NE(error_of([] { kvlab::parse_layers("0-1x"); }).find("'1x' is not a non-negative integer"),
            std::string::npos);
  EXPECT_NE(error_of([] { kvlab::parse_layers("-1"); }).find("layers are numbered from 0"),
            std::string::npos);
  EXPECT_NE(error_of([] { kvlab::parse_layers("1-2-3"); }).find("--layers '1-2-3'"), std::string::npos);
  EXPECT_NE(error_of([] { kvlab::parse_layers("99999999999999999999"); }).find("not a non-negative integer"),
            std::string::npos);
  EXPECT_NE(error_of([] { kvlab::parse_layers(""); }).find("--layers ''"), std::string::npos);
}

TEST(MethodList, SpecsKeepTheirCommas) {
  using V = std::vector<std::string>;
  EXPECT_EQ(kvlab::split_method_list("kivi-2"), V{"kivi-2"});
  EXPECT_EQ(kvlab::split_method_list("fp16,int8,kivi-4"), (V{"fp16", "int8", "kivi-4"}));
  EXPECT_EQ(kvlab::split_method_list("kivi-2,kitty:kbits=2,boost=0.25,int8:group=all,params=fp32,fp16"),
            (V{"kivi-2", "kitty:kbits=2,boost=0.25", "int8:group=all,params=fp32", "fp16"}));
  // values holding ':' stay with their method
  EXPECT_EQ(kvlab::split_method_list(
                "fp8:scale=channel,calib=percentile:99.9,kvquant:bits=2,calib=dump:a.h5,kivi-2"),
            (V{"fp8:scale=channel,calib=percentile:99.9", "kvquant:bits=2,calib=dump:a.h5", "kivi-2"}));
  EXPECT_NE(error_of([] { kvlab::split_method_list("kivi-2,,int8"); }).find("empty method name"),
            std::string::npos);
  EXPECT_NE(error_of([] { kvlab::split_method_list("kbits=2,kivi-2"); }).find("parameter without a method"),
            std::string::npos);
}

TEST(MethodList, DefaultIsTheSevenPresets) {
  EXPECT_EQ(kvlab::default_eval_methods(), (std::vector<std::string>{"fp16", "int8", "kivi-4", "kivi-2",
                                                                     "kivi-2-sink", "kitty", "kitty-pro"}));
}

}  // namespace
