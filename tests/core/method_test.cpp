// method.h: the registry, spec strings, schedules, bit accounting and apply.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "kvlab/half.h"
#include "kvlab/method.h"
#include "kvlab/quantizer.h"
#include "test_util.h"

namespace {

using namespace kvlab;

// ---------------------------------------------------------------------------------------------
// Parse / print.

TEST(MethodSpec, PresetsRoundTrip) {
  ASSERT_GE(presets().size(), 7u);
  for (const Preset& p : presets()) {
    SCOPED_TRACE(p.name);
    const MethodPtr m = parse_method(p.name);
    EXPECT_EQ(m->spec(), p.spec);                           // the canonical string is the preset's spec
    EXPECT_TRUE(*parse_method(p.spec) == *m);               // the spec means the preset
    EXPECT_TRUE(*parse_method(m->spec()) == *m);            // parse(print(m)) == m
    EXPECT_EQ(parse_method(m->spec())->spec(), m->spec());  // printing is stable
    EXPECT_FALSE(p.description.empty());
  }
}

TEST(MethodSpec, PresetFields) {
  const MethodPtr k2m = parse_method("kivi-2");
  EXPECT_EQ(k2m->family(), "kivi");
  const UniformParams& k2 = *k2m->uniform();
  EXPECT_EQ(k2.kbits, 2);
  EXPECT_EQ(k2.vbits, 2);
  EXPECT_EQ(k2.group, 128);
  EXPECT_EQ(k2.vgroup, kWholeAxis);
  EXPECT_EQ(k2.sink, 0);
  EXPECT_EQ(k2.residual, 128);
  EXPECT_EQ(k2.params, ParamType::F16);
  EXPECT_EQ(k2.profile, Profile::Kvlab);
  EXPECT_EQ(parse_method("kivi-4")->uniform()->kbits, 4);
  EXPECT_EQ(parse_method("kivi-2-sink")->uniform()->sink, 32);
  EXPECT_EQ(parse_method("kitty")->uniform()->boost, 0.125);
  EXPECT_EQ(parse_method("kitty")->uniform()->sink, 32);
  EXPECT_EQ(parse_method("kitty-pro")->uniform()->boost, 0.25);
  EXPECT_EQ(parse_method("int8")->family(), "int8");
  EXPECT_EQ(parse_method("int8")->uniform()->group, kWholeAxis);
  EXPECT_EQ(parse_method("fp16")->family(), "fp16");
  EXPECT_EQ(parse_method("fp16")->uniform(), nullptr);
  // family defaults without a preset: kitty starts from boost 0.125 and sink 32
  EXPECT_TRUE(*parse_method("kitty") == *parse_method("kitty:kbits=2"));
}

TEST(MethodSpec, CustomSpecsRoundTrip) {
  const std::pair<const char*, const char*> cases[] = {
      {"kivi:kbits=3",
       "kivi:kbits=3,vbits=2,group=128,vgroup=all,sink=0,residual=128,params=fp16,profile=kvlab"},
      {"kivi:vgroup=32,sink=4,residual=16,params=fp32,group=64",
       "kivi:kbits=2,vbits=2,group=64,vgroup=32,sink=4,residual=16,params=fp32,profile=kvlab"},
      {"kivi:profile=kivi",
       "kivi:kbits=2,vbits=2,group=128,vgroup=all,sink=0,residual=128,params=fp16,profile=kivi"},
      {"kitty:boost=0.3,group=32,profile=kitty-sim",
       "kitty:kbits=2,vbits=2,group=32,vgroup=all,sink=32,residual=128,boost=0.3,params=fp16,profile=kitty-"
       "sim"},
      {"kitty:kbits=4,vbits=3,boost=0,sink=0",
       "kitty:kbits=4,vbits=3,group=128,vgroup=all,sink=0,residual=128,boost=0,params=fp16,profile=kvlab"},
      {"int8:group=64,params=fp32", "int8:group=64,params=fp32"},
      {"int8", "int8:group=all,params=fp16"},
      {"fp16", "fp16"},
  };
  for (const auto& [text, canonical] : cases) {
    SCOPED_TRACE(text);
    const MethodPtr m = parse_method(text);
    EXPECT_EQ(m->spec(), canonical);
    EXPECT_TRUE(*parse_method(m->spec()) == *m);
    EXPECT_EQ(parse_method(canonical)->spec(), canonical);
  }
  // parameters set by hand
  UniformParams p;
  p.kbits = 5;
  p.vbits = 3;
  p.group = 64;
  p.vgroup = 16;
  p.sink = 8;
  p.residual = 64;
  p.params = ParamType::F32;
  const MethodPtr kivi = make_uniform_method("kivi", p);
  EXPECT_EQ(kivi->spec(),
            "kivi:kbits=5,vbits=3,group=64,vgroup=16,sink=8,residual=64,params=fp32,profile=kvlab");
  EXPECT_EQ(*kivi->uniform(), p);
  EXPECT_TRUE(*parse_method(kivi->spec()) == *kivi);
  p.boost = 0.1;
  p.kbits = 4;
  const MethodPtr kitty = make_uniform_method("kitty", p);
  EXPECT_EQ(
      kitty->spec(),
      "kitty:kbits=4,vbits=3,group=64,vgroup=16,sink=8,residual=64,boost=0.1,params=fp32,profile=kvlab");
  EXPECT_EQ(*kitty->uniform(), p);
  EXPECT_TRUE(*parse_method(kitty->spec()) == *kitty);
  EXPECT_THROW(make_uniform_method("fp16", p), std::invalid_argument);  // not a uniform family
}

TEST(MethodRegistry, EveryPresetAndFamilyIsListed) {
  std::vector<std::string> families;
  for (const MethodFamily* f : method_families()) families.push_back(f->name);
  ASSERT_GE(families.size(), 4u);
  EXPECT_EQ(std::vector<std::string>(families.begin(), families.begin() + 4),
            (std::vector<std::string>{"fp16", "int8", "kivi", "kitty"}));
  for (const MethodFamily* f : method_families()) {
    SCOPED_TRACE(f->name);
    EXPECT_EQ(find_method_family(f->name), f);
    EXPECT_FALSE(f->summary.empty());
    for (const MethodKey& k : f->keys) EXPECT_FALSE(k.meaning.empty()) << k.name;
    for (const Preset& p : f->presets) EXPECT_EQ(parse_method(p.name)->family(), f->name);
  }
  EXPECT_EQ(find_method_family("nope"), nullptr);
  // the error for an unknown name lists every preset and every family with keys
  try {
    parse_method("nope");
    FAIL();
  } catch (const std::invalid_argument& e) {
    const std::string msg = e.what();
    for (const Preset& p : presets()) EXPECT_NE(msg.find(p.name), std::string::npos) << p.name;
    for (const char* f : {"int8:key=value,...", "kivi:key=value,...", "kitty:key=value,..."})
      EXPECT_NE(msg.find(f), std::string::npos) << f;
  }
  EXPECT_THROW(parse_method("fp16:group=4"), std::invalid_argument);  // fp16 has no keys
  // a family or preset name cannot be registered twice
  MethodFamily dup{"kivi", "again", {}, {}, nullptr};
  EXPECT_THROW(register_method_family(dup), std::invalid_argument);
  MethodFamily preset_taken{"kivi-again", "again", {}, {{"kivi-2", "kivi", "taken"}}, nullptr};
  EXPECT_THROW(register_method_family(preset_taken), std::invalid_argument);
}

TEST(MethodRegistry, KittyWithBoostKeepsTheOtherParameters) {
  const MethodPtr m = kitty_with_boost(*parse_method("kitty:group=64,sink=4"), 0.5);
  EXPECT_EQ(
      m->spec(),
      "kitty:kbits=2,vbits=2,group=64,vgroup=all,sink=4,residual=128,boost=0.5,params=fp16,profile=kvlab");
  EXPECT_THROW(kitty_with_boost(*parse_method("kivi-2"), 0.5), std::invalid_argument);
  EXPECT_THROW(kitty_with_boost(*m, 1.5), std::invalid_argument);
}

TEST(MethodSpec, QuantizersOfAMethod) {
  const MethodPtr m = parse_method("kitty");
  const QuantizerSpec k = *m->key_quantizer(), v = *m->value_quantizer();
  EXPECT_EQ(to_string(k), "scheme=asym,bits=2,axis=channel,group=128,params=fp16,profile=kvlab,boost=0.125");
  EXPECT_EQ(to_string(v), "scheme=asym,bits=2,axis=token,group=all,params=fp16,profile=kvlab");
  const MethodPtr i8 = parse_method("int8");
  EXPECT_EQ(to_string(*i8->key_quantizer()),
            "scheme=sym,bits=8,axis=channel,group=all,params=fp16,profile=kvlab");
  EXPECT_EQ(to_string(*i8->value_quantizer()),
            "scheme=sym,bits=8,axis=channel,group=all,params=fp16,profile=kvlab");
  EXPECT_FALSE(parse_method("fp16")->key_quantizer().has_value());
}

// ---------------------------------------------------------------------------------------------
// Schedules, by hand: keys in whole groups of G after the sink, values all but the newest R.

void expect_schedule(const std::string& method, int64_t T, int64_t kb, int64_t ke, int64_t vb, int64_t ve) {
  const Schedule s = parse_method(method)->schedule(T);
  EXPECT_EQ(s.key_begin, kb) << method << " T=" << T;
  EXPECT_EQ(s.key_end, ke) << method << " T=" << T;
  EXPECT_EQ(s.value_begin, vb) << method << " T=" << T;
  EXPECT_EQ(s.value_end, ve) << method << " T=" << T;
}

TEST(Schedule, ByHand) {
  // kivi-2, T=300: keys floor(300/128)*128 = 256 -> [0, 256); values 300 - 128 = 172 -> [0, 172)
  expect_schedule("kivi-2", 300, 0, 256, 0, 172);
  // kivi-2-sink, T=300: keys 32 + floor(268/128)*128 = 288 -> [32, 288); values [32, 172)
  expect_schedule("kivi-2-sink", 300, 32, 288, 32, 172);
  // kitty has the same sink and G, R
  expect_schedule("kitty", 300, 32, 288, 32, 172);
  // T smaller than the sink: nothing quantized, [20, 20)
  expect_schedule("kivi-2-sink", 20, 20, 20, 20, 20);
  // T < residual (and < G): nothing quantized
  expect_schedule("kivi-2", 100, 0, 0, 0, 0);
  // T = sink + G = sink + R: keys one group [32, 160); values max(32, 160 - 128) = 32: none
  expect_schedule("kivi-2-sink", 160, 32, 160, 32, 32);
  // exactly one group, no sink: keys [0, 128); values none
  expect_schedule("kivi-2", 128, 0, 128, 0, 0);
  // int8 quantizes everything; fp16 nothing
  expect_schedule("int8", 300, 0, 300, 0, 300);
  expect_schedule("fp16", 300, 0, 0, 0, 0);
  // group=all, residual=0: all keys and values
  expect_schedule("kivi:group=all,residual=0", 300, 0, 300, 0, 300);
  // G=64, sink 4, R 16, T=200: keys 4 + floor(196/64)*64 = 196 -> [4, 196); values [4, 184)
  expect_schedule("kivi:group=64,sink=4,residual=16", 200, 4, 196, 4, 184);
}

// ---------------------------------------------------------------------------------------------
// Bits per element.

TEST(BitsPerElement, Kivi2ByHand) {
  // T=256, D=128, params fp16 (16 bits).
  // keys: all 256 tokens quantized, 2 bits + (scale + zero) * 16 bits per 128 tokens per channel
  //   = 2 + 32/128 = 2.25
  // values: 128 tokens quantized per token over all 128 channels: 2 + 32/128 = 2.25 bits,
  //   128 tokens in fp16: (128 * 2.25 + 128 * 16) / 256 = 9.125
  const Bits b = parse_method("kivi-2")->bits(256, 128);
  EXPECT_DOUBLE_EQ(b.key, 2.25);
  EXPECT_DOUBLE_EQ(b.value, 9.125);
  EXPECT_DOUBLE_EQ(b.both(), (2.25 + 9.125) / 2);
}

TEST(BitsPerElement, KittyByHand) {
  // kitty, T=288, D=128: keys [32, 288) = 256 tokens (2 pages of 128); k = int(128 * 0.125) = 16.
  //   codes 256*128*2 = 65536; scale+zero 128 ch * 2 pages * 2 * 16 = 8192;
  //   high plane 16 * 256 * 2 = 8192; index 2 pages * 128 * 8 = 2048; sink fp16 32*128*16 = 65536
  //   total 149504 / (288 * 128) = 149504 / 36864 = 73/18
  // values [32, 160) = 128 tokens: 128*128*2 + 128 * 2 * 16 = 36864; fp16 160*128*16 = 327680
  //   total 364544 / 36864 = 89/9
  const Bits b = parse_method("kitty")->bits(288, 128);
  EXPECT_DOUBLE_EQ(b.key, 73.0 / 18.0);
  EXPECT_DOUBLE_EQ(b.value, 89.0 / 9.0);
}

TEST(BitsPerElement, Int8AndFp16ByHand) {
  // int8, T=256, D=128: 8 bits + one fp16 scale per channel over all 256 tokens: 8 + 16/256
  const Bits i8 = parse_method("int8")->bits(256, 128);
  EXPECT_DOUBLE_EQ(i8.key, 8.0625);
  EXPECT_DOUBLE_EQ(i8.value, 8.0625);
  const Bits f = parse_method("fp16")->bits(256, 128);
  EXPECT_DOUBLE_EQ(f.key, 16.0);
  EXPECT_DOUBLE_EQ(f.value, 16.0);
}

TEST(BitsPerElement, ConsistentWithTheQuantizedTensors) {
  // method bits * T * D = bits_per_element(quantized part) * n * D + 16 * (T - n) * D
  const int64_t D = 64;
  for (const char* name : {"kivi-2", "kivi-4", "kivi-2-sink", "kitty", "kitty-pro", "int8",
                           "kivi:group=32,vgroup=16,sink=8,residual=40,params=fp32",
                           "kitty:group=64,boost=0.3,profile=kitty-sim,kbits=3,vbits=4"})
    for (int64_t T : {300, 257, 1000}) {
      SCOPED_TRACE(::testing::Message() << name << " T=" << T);
      const MethodPtr m = parse_method(name);
      const Schedule s = m->schedule(T);
      const Tensor x = kvtest::random_kv({T, D}, (uint32_t)T);
      auto part_bits = [&](const QuantizerSpec& q, int64_t b, int64_t e) {
        if (e <= b) return 0.0;
        const Tensor part = kvtest::make_tensor(
            {e - b, D}, std::vector<float>(x.data.begin() + b * D, x.data.begin() + e * D));
        return bits_per_element(quantize(part.view(), q)) * (double)((e - b) * D);
      };
      const double key =
          part_bits(*m->key_quantizer(), s.key_begin, s.key_end) + 16.0 * (T - (s.key_end - s.key_begin)) * D;
      const double val = part_bits(*m->value_quantizer(), s.value_begin, s.value_end) +
                         16.0 * (T - (s.value_end - s.value_begin)) * D;
      const Bits b = m->bits(T, D);
      EXPECT_NEAR(b.key, key / (double)(T * D), 1e-12);
      EXPECT_NEAR(b.value, val / (double)(T * D), 1e-12);
    }
}

// ---------------------------------------------------------------------------------------------
// apply.

TEST(ApplyMethod, KeepsFullPrecisionTokensAndQuantizesTheRest) {
  // fp16-representable inputs of shape (2, 300, 16). kivi-2-sink and kitty at T=300 quantize
  // keys [32, 288) and values [32, 172); the custom spec keys [5, 293) (9 groups of 32) and
  // values [5, 283).
  const Tensor k = kvtest::rounded_to_half(kvtest::random_kv({2, 300, 16}, 1));
  const Tensor v = kvtest::rounded_to_half(kvtest::random_kv({2, 300, 16}, 2));
  const std::pair<const char*, Schedule> cases[] = {
      {"kivi-2-sink", {32, 288, 32, 172}},
      {"kitty", {32, 288, 32, 172}},
      {"kivi:group=32,vgroup=8,sink=5,residual=17", {5, 293, 5, 283}},
  };
  for (const auto& [name, want] : cases) {
    SCOPED_TRACE(name);
    const MethodPtr m = parse_method(name);
    const Schedule s = m->schedule(300);
    ASSERT_EQ(s.key_begin, want.key_begin);
    ASSERT_EQ(s.key_end, want.key_end);
    ASSERT_EQ(s.value_begin, want.value_begin);
    ASSERT_EQ(s.value_end, want.value_end);
    const Reconstruction r = m->apply(k.view(), v.view());
    ASSERT_EQ(r.k.shape, k.shape);
    ASSERT_EQ(r.v.shape, v.shape);
    auto check = [&](const Tensor& in, const Tensor& out, int64_t b, int64_t e, const QuantizerSpec& q) {
      // the quantized range is exactly what quantize + dequantize give for those tokens
      Tensor part = kvtest::make_tensor({2, e - b, 16}, std::vector<float>(2 * (e - b) * 16));
      for (int n = 0; n < 2; ++n)
        std::copy_n(&in.data[(n * 300 + b) * 16], (e - b) * 16, &part.data[n * (e - b) * 16]);
      const std::vector<float> deq = dequantize(quantize(part.view(), q));
      int64_t kept_bad = 0, quant_bad = 0, changed = 0;
      for (int n = 0; n < 2; ++n)
        for (int64_t t = 0; t < 300; ++t)
          for (int c = 0; c < 16; ++c) {
            const int64_t i = (n * 300 + t) * 16 + c;
            if (t < b || t >= e) {
              kept_bad += kvtest::bits_of(out.data[i]) != kvtest::bits_of(in.data[i]);
            } else {
              quant_bad += out.data[i] != deq[(n * (e - b) + (t - b)) * 16 + c];
              changed += out.data[i] != in.data[i];
            }
          }
      EXPECT_EQ(kept_bad, 0);
      EXPECT_EQ(quant_bad, 0);
      EXPECT_GT(changed, 2 * (e - b) * 16 * 8 / 10);  // 2-bit codes change almost every value
    };
    check(k, r.k, s.key_begin, s.key_end, *m->key_quantizer());
    check(v, r.v, s.value_begin, s.value_end, *m->value_quantizer());
  }
}

TEST(ApplyMethod, FullPrecisionTokensAreRoundedToFp16) {
  const Tensor k = kvtest::random_kv({40, 8}, 3), v = kvtest::random_kv({40, 8}, 4);
  const Reconstruction r = parse_method("fp16")->apply(k.view(), v.view());
  int64_t bad = 0, differs = 0;
  for (size_t i = 0; i < k.data.size(); ++i) {
    bad += r.k.data[i] != kvtest::h16(k.data[i]) || r.v.data[i] != kvtest::h16(v.data[i]);
    differs += k.data[i] != kvtest::h16(k.data[i]);
  }
  EXPECT_EQ(bad, 0);
  EXPECT_GT(differs, 0);  // the inputs were not fp16 values to begin with
}

TEST(ApplyMethod, Fp16InputEqualsItsFp32Values) {
  const Tensor k = kvtest::rounded_to_half(kvtest::random_kv({300, 16}, 5));
  const Tensor v = kvtest::rounded_to_half(kvtest::random_kv({300, 16}, 6));
  const auto kb = kvtest::half_bits_of(k), vb = kvtest::half_bits_of(v);
  for (const char* name : {"kivi-2", "kitty", "int8"}) {
    const MethodPtr m = parse_method(name);
    const Reconstruction a = m->apply(k.view(), v.view());
    const Reconstruction b = m->apply(kvtest::half_view(kb, k.shape), kvtest::half_view(vb, v.shape));
    EXPECT_EQ(a.k.data, b.k.data) << name;
    EXPECT_EQ(a.v.data, b.v.data) << name;
  }
}

TEST(ApplyMethod, Int8QuantizesEveryToken) {
  const Tensor k = kvtest::rounded_to_half(kvtest::random_kv({64, 8}, 7));
  const MethodPtr m = parse_method("int8");
  const Reconstruction r = m->apply(k.view(), k.view());
  EXPECT_EQ(r.k.data, dequantize(quantize(k.view(), *m->key_quantizer())));
  EXPECT_EQ(r.v.data, dequantize(quantize(k.view(), *m->value_quantizer())));
}

}  // namespace
