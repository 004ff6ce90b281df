// spec.h: the quantizer spec string, its canonical form and validation rules.
#include <gtest/gtest.h>

#include <stdexcept>
#include <string>

#include "kvlab/spec.h"

namespace {

using namespace kvlab;

TEST(QuantizerSpec, DefaultCanonicalString) {
  EXPECT_EQ(to_string(QuantizerSpec{}),
            "scheme=asym,bits=2,axis=channel,group=all,params=fp32,profile=kvlab");
  EXPECT_EQ(parse_quantizer(""), QuantizerSpec{});
}

TEST(QuantizerSpec, ParseToCanonical) {
  const std::pair<const char*, const char*> cases[] = {
      {"bits=4", "scheme=asym,bits=4,axis=channel,group=all,params=fp32,profile=kvlab"},
      {"bits=4,scheme=sym,axis=token,group=32",
       "scheme=sym,bits=4,axis=token,group=32,params=fp32,profile=kvlab"},
      {"profile=kivi",
       "scheme=asym,bits=2,axis=channel,group=all,params=fp16,profile=kivi"},  // fp16 by default
      {"profile=kitty-sim,group=128,boost=0.125",
       "scheme=asym,bits=2,axis=channel,group=128,params=fp16,profile=kitty-sim,boost=0.125"},
      {"group=16,boost=0", "scheme=asym,bits=2,axis=channel,group=16,params=fp32,profile=kvlab,boost=0"},
      {"params=fp16,bits=8,group=1", "scheme=asym,bits=8,axis=channel,group=1,params=fp16,profile=kvlab"},
  };
  for (const auto& [text, canonical] : cases) {
    const QuantizerSpec s = parse_quantizer(text);
    EXPECT_EQ(to_string(s), canonical) << text;
    EXPECT_EQ(parse_quantizer(canonical), s) << text;
  }
  EXPECT_EQ(parse_quantizer("bits=4,scheme=sym"), parse_quantizer("scheme=sym,bits=4"));
}

TEST(QuantizerSpec, EnumNames) {
  EXPECT_STREQ(to_string(Scheme::Asym), "asym");
  EXPECT_STREQ(to_string(Scheme::Sym), "sym");
  EXPECT_STREQ(to_string(Axis::Channel), "channel");
  EXPECT_STREQ(to_string(Axis::Token), "token");
  EXPECT_STREQ(to_string(ParamType::F32), "fp32");
  EXPECT_STREQ(to_string(ParamType::F16), "fp16");
  EXPECT_STREQ(to_string(Profile::Kvlab), "kvlab");
  EXPECT_STREQ(to_string(Profile::Kivi), "kivi");
  EXPECT_STREQ(to_string(Profile::KittySim), "kitty-sim");
}

// The rules of spec.h / quantizer.h, restated: bits 1..8 (sym 2..8), group `all` or >= 1,
// kivi / kitty-sim asym with fp16 params, boost in [0, 1] on axis=channel, asym, bits <= 6, a
// set group, and not with kivi.
bool valid(const QuantizerSpec& s) {
  if (s.bits < 1 || s.bits > 8) return false;
  if (s.scheme == Scheme::Sym && s.bits < 2) return false;
  if (s.group != kWholeAxis && s.group < 1) return false;
  if (s.profile != Profile::Kvlab && (s.scheme != Scheme::Asym || s.params != ParamType::F16)) return false;
  if (s.boost >= 0) {
    if (s.boost > 1 || s.axis != Axis::Channel || s.scheme != Scheme::Asym || s.bits > 6) return false;
    if (s.profile == Profile::Kivi || s.group == kWholeAxis) return false;
  }
  return true;
}

TEST(QuantizerSpec, EveryCombinationValidatesAndRoundTrips) {
  int n_valid = 0, n_total = 0;
  for (Scheme scheme : {Scheme::Asym, Scheme::Sym})
    for (int bits = 0; bits <= 9; ++bits)
      for (Axis axis : {Axis::Channel, Axis::Token})
        for (int group : {kWholeAxis, 0, 1, 8})
          for (ParamType params : {ParamType::F32, ParamType::F16})
            for (Profile profile : {Profile::Kvlab, Profile::Kivi, Profile::KittySim})
              for (double boost : {-1.0, 0.0, 0.25, 1.0, 1.5}) {
                QuantizerSpec s;
                s.scheme = scheme;
                s.bits = bits;
                s.axis = axis;
                s.group = group;
                s.params = params;
                s.profile = profile;
                s.boost = boost;
                ++n_total;
                const std::string text = to_string(s);
                if (valid(s)) {
                  ++n_valid;
                  EXPECT_NO_THROW(validate(s)) << text;
                  EXPECT_EQ(parse_quantizer(text), s) << text;
                  EXPECT_EQ(to_string(parse_quantizer(text)), text);
                } else {
                  EXPECT_THROW(validate(s), std::invalid_argument) << text;
                  EXPECT_THROW(parse_quantizer(text), std::invalid_argument) << text;
                }
              }
  EXPECT_EQ(n_total, 2 * 10 * 2 * 4 * 2 * 3 * 5);
  EXPECT_GT(n_valid, 100);
}

}  // namespace
