// datasets llama2c.h: the llama2.c runner on the real stories260K checkpoint (greedy text as
// run.c prints it), its tokenizer, the captured q/k/v, and the errors for bad files.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include <unistd.h>

#include "kvlab/llama2c.h"

namespace {

using namespace kvlab;
using ::testing::HasSubstr;
namespace fs = std::filesystem;

const std::string kDir = std::string(KVLAB_SOURCE_DIR) + "/data/stories260K/";  // shipped with kvlab
const std::string kModel = kDir + "stories260K.bin";
const std::string kTok = kDir + "tok512.bin";

#define REQUIRE_STORIES()                                                             \
  do {                                                                                \
    if (!fs::exists(kModel) || !fs::exists(kTok))                                     \
      GTEST_SKIP() << "stories260K not found at " << kDir << " (shared data absent)"; \
  } while (0)

// The model and tokenizer, loaded once for the whole suite.
const Llama2cModel& model() {
  static const Llama2cModel m = load_llama2c(kModel);
  return m;
}
const Llama2cTokenizer& tokenizer() {
  static const Llama2cTokenizer t(kTok, model().config.vocab_size);
  return t;
}

std::vector<char> file_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

// A file in the temp directory, removed when the test ends.
struct TempFile {
  std::string path;
  TempFile(const std::string& name, const std::vector<char>& bytes)
      : path((fs::temp_directory_path() / ("kvlab_llama2c_" + std::to_string(getpid()) + "_" + name))
                 .string()) {
    std::ofstream(path, std::ios::binary).write(bytes.data(), (std::streamsize)bytes.size());
  }
  ~TempFile() { std::remove(path.c_str()); }
};

template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "(no exception)";
}

// ---------------------------------------------------------------------------------------------
// The real model

TEST(Llama2c, LoadsStoriesHeader) {
  REQUIRE_STORIES();
  const Llama2cConfig& c = model().config;
  EXPECT_EQ(c.dim, 64);
  EXPECT_EQ(c.hidden_dim, 172);
  EXPECT_EQ(c.n_layers, 5);
  EXPECT_EQ(c.n_heads, 8);
  EXPECT_EQ(c.n_kv_heads, 4);
  EXPECT_EQ(c.vocab_size, 512);
  EXPECT_EQ(c.seq_len, 512);
  EXPECT_TRUE(c.shared_classifier);
  EXPECT_EQ(llama2c_expected_bytes(c), fs::file_size(kModel));
}

// run.c, greedy, prompt "Once upon a time" (see data/stories260K/README.md).
TEST(Llama2c, GreedyStoryMatchesRunC) {
  REQUIRE_STORIES();
  const std::string expected =
      "Once upon a time, there was a little girl named Lily. She loved to play outside in the park. "
      "One day, she saw a big, red ball. She wanted to play with it, but it was too high.";
  GenerateParams p;
  p.steps = 80;  // the expected text is ~45 tokens
  const auto t0 = std::chrono::steady_clock::now();
  const Generation g = llama2c_generate(model(), tokenizer(), "Once upon a time", p);
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  std::printf("stories260K greedy: %zu tokens in %.1f ms\n", g.tokens.size(), ms);
  ASSERT_GE(g.text.size(), expected.size()) << g.text;
  EXPECT_EQ(g.text.substr(0, expected.size()), expected) << "full text: " << g.text;
  EXPECT_EQ(g.tokens[0], Llama2cTokenizer::kBos);
  EXPECT_EQ(g.tokens.size(), (size_t)(g.prompt_tokens + p.steps)) << "stopped early on BOS";
}

TEST(Llama2c, GreedyIsDeterministicAndStepsCount) {
  REQUIRE_STORIES();
  GenerateParams p;
  p.steps = 10;
  const auto a = llama2c_generate(model(), tokenizer(), "The cat", p);
  const auto b = llama2c_generate(model(), tokenizer(), "The cat", p);
  EXPECT_EQ(a.tokens, b.tokens);
  EXPECT_EQ((int)a.tokens.size(), a.prompt_tokens + 10);
  p.steps = 0;
  const auto c = llama2c_generate(model(), tokenizer(), "The cat", p);
  EXPECT_EQ((int)c.tokens.size(), c.prompt_tokens);
  EXPECT_EQ(std::vector<int32_t>(a.tokens.begin(), a.tokens.begin() + a.prompt_tokens), c.tokens);
}

TEST(Llama2c, SeededSamplingRepeatsAndSeedsDiffer) {
  REQUIRE_STORIES();
  GenerateParams p;
  p.steps = 60;
  p.temperature = 1.0f;
  p.seed = 7;
  const auto a = llama2c_generate(model(), tokenizer(), "Once upon a time", p);
  const auto b = llama2c_generate(model(), tokenizer(), "Once upon a time", p);
  EXPECT_EQ(a.tokens, b.tokens);
  p.seed = 8;
  const auto c = llama2c_generate(model(), tokenizer(), "Once upon a time", p);
  EXPECT_NE(a.tokens, c.tokens);
  p.top_p = 0.9f;
  const auto d = llama2c_generate(model(), tokenizer(), "Once upon a time", p);
  const auto e = llama2c_generate(model(), tokenizer(), "Once upon a time", p);
  EXPECT_EQ(d.tokens, e.tokens);
  for (const auto* g : {&a, &c, &d})
    for (size_t i = 1; i < g->tokens.size(); ++i) EXPECT_NE(g->tokens[i], Llama2cTokenizer::kBos);
}

TEST(Llama2c, StopsAtSeqLen) {
  REQUIRE_STORIES();
  GenerateParams p;
  p.steps = 2000;
  p.temperature = 0.8f;
  const auto g = llama2c_generate(model(), tokenizer(), "Once upon a time", p);
  EXPECT_LE((int)g.tokens.size(), model().config.seq_len);
  if (!g.stopped) {
    EXPECT_EQ((int)g.tokens.size(), model().config.seq_len);
  }
}

// The capture: shapes, k = RoPE(k_pre_rope) by an independent double-precision rotation, q and k
// unrotated at position 0, and the KV prefix independent of what follows.
TEST(Llama2c, CaptureShapesAndRope) {
  REQUIRE_STORIES();
  GenerateParams p;
  p.steps = 30;
  const auto g = llama2c_generate(model(), tokenizer(), "Once upon a time", p);
  const Llama2cConfig& c = model().config;
  const int64_t T = (int64_t)g.tokens.size(), D = c.head_dim();
  ASSERT_EQ((int)g.kv.size(), c.n_layers);
  for (const LayerKV& kv : g.kv) {
    EXPECT_EQ(kv.q.shape, (std::vector<int64_t>{c.n_heads, T, D}));
    for (const Tensor* t : {&kv.k, &kv.v, &kv.k_pre_rope})
      EXPECT_EQ(t->shape, (std::vector<int64_t>{c.n_kv_heads, T, D}));
    for (const Tensor* t : {&kv.q, &kv.k, &kv.v, &kv.k_pre_rope}) {
      ASSERT_EQ((int64_t)t->data.size(), t->shape[0] * T * D);
      for (float x : t->data) ASSERT_TRUE(std::isfinite(x));
    }
  }
  double max_err = 0, max_rot = 0;
  for (const LayerKV& kv : g.kv)
    for (int64_t h = 0; h < c.n_kv_heads; ++h)
      for (int64_t t = 0; t < T; ++t) {
        const float* pre = kv.k_pre_rope.data.data() + (h * T + t) * D;
        const float* k = kv.k.data.data() + (h * T + t) * D;
        for (int64_t i = 0; i < D; i += 2) {
          const double angle = (double)t * std::pow(10000.0, -(double)i / (double)D);
          const double a = pre[i], b = pre[i + 1];
          const double k0 = a * std::cos(angle) - b * std::sin(angle),
                       k1 = a * std::sin(angle) + b * std::cos(angle);
          max_err = std::max({max_err, std::abs(k0 - k[i]), std::abs(k1 - k[i + 1])});
          max_rot = std::max({max_rot, std::abs(k0 - a), std::abs(k1 - b)});
          if (t == 0) {
            EXPECT_EQ(k[i], pre[i]);
            EXPECT_EQ(k[i + 1], pre[i + 1]);
          }
        }
      }
  EXPECT_LT(max_err, 1e-4);  // fp32 angles for t < 50: a few ulps of the values
  EXPECT_GT(max_rot, 0.1);   // RoPE did rotate something (guards against k == k_pre_rope)

  // Causal: the first positions of a longer run capture the same values.
  p.steps = 10;
  const auto s = llama2c_generate(model(), tokenizer(), "Once upon a time", p);
  const int64_t Ts = (int64_t)s.tokens.size();
  for (int64_t h = 0; h < c.n_heads; ++h)
    for (int64_t t = 0; t < Ts; ++t)
      for (int64_t i = 0; i < D; ++i)
        ASSERT_EQ(s.kv[4].q.data[(h * Ts + t) * D + i], g.kv[4].q.data[(h * T + t) * D + i]);
}

// The dump through DumpWriter and back through open_dump: metadata and every value, exactly.
TEST(Llama2c, DumpRoundTrip) {
  REQUIRE_STORIES();
  GenerateParams p;
  p.steps = 20;
  const auto g = llama2c_generate(model(), tokenizer(), "Once upon a time", p);
  const std::string path =
      (fs::temp_directory_path() / ("kvlab_llama2c_" + std::to_string(getpid()) + "_dump.h5")).string();
  write_llama2c_dump(path, model(), g, "stories260K", "test source");
  const auto r = open_dump(path);
  const DumpInfo& in = r->info();
  EXPECT_EQ(in.model, "stories260K");
  EXPECT_EQ(in.num_layers, 5);
  EXPECT_EQ(in.num_q_heads, 8);
  EXPECT_EQ(in.num_kv_heads, 4);
  EXPECT_EQ(in.head_dim, 8);
  EXPECT_EQ(in.tokens, (int64_t)g.tokens.size());
  EXPECT_EQ(in.rope_style, RopeStyle::Adjacent);
  EXPECT_EQ(in.rope_theta, 10000.0);
  EXPECT_EQ(in.dtype, CaptureDtype::F32);
  EXPECT_TRUE(in.k_after_rope);
  EXPECT_TRUE(in.has_k_pre_rope);
  EXPECT_EQ(in.token_ids, g.tokens);
  EXPECT_EQ(in.text, g.text);
  EXPECT_EQ(in.source, "test source");
  for (int64_t l = 0; l < in.num_layers; ++l) {
    const LayerKV kv = r->read_layer(l);
    EXPECT_EQ(kv.q.data, g.kv[l].q.data) << "layer " << l;
    EXPECT_EQ(kv.k.data, g.kv[l].k.data) << "layer " << l;
    EXPECT_EQ(kv.v.data, g.kv[l].v.data) << "layer " << l;
    EXPECT_EQ(kv.k_pre_rope.data, g.kv[l].k_pre_rope.data) << "layer " << l;
  }
  std::remove(path.c_str());
}

// data/stories260K.h5 (scripts/make_default_dump.sh) is what the runner makes today.
TEST(Llama2c, ShippedDefaultDumpMatchesRunner) {
  REQUIRE_STORIES();
  const std::string path = std::string(KVLAB_SOURCE_DIR) + "/data/stories260K.h5";
  if (!fs::exists(path)) GTEST_SKIP() << path << " not made yet (scripts/make_default_dump.sh)";
  const auto r = open_dump(path);
  const DumpInfo& in = r->info();
  EXPECT_EQ(in.model, "stories260K");
  EXPECT_THAT(in.source, HasSubstr("kvlab dump --llama2c"));
  EXPECT_THAT(in.source, HasSubstr("--steps 400 --temperature 0"));
  EXPECT_EQ(in.text.rfind("Once upon a time, there was a little girl named Lily.", 0), 0u) << in.text;
  GenerateParams p;
  p.steps = 400;
  const auto g = llama2c_generate(model(), tokenizer(), "Once upon a time", p);
  ASSERT_EQ(in.token_ids, g.tokens);
  EXPECT_EQ(in.text, g.text);
  // libm's exp/sin/cos may differ in the last bit between machines; the values barely move.
  for (int64_t l = 0; l < in.num_layers; ++l) {
    const LayerKV kv = r->read_layer(l);
    const std::pair<const Tensor*, const Tensor*> pairs[] = {
        {&kv.q, &g.kv[l].q}, {&kv.k, &g.kv[l].k}, {&kv.v, &g.kv[l].v}, {&kv.k_pre_rope, &g.kv[l].k_pre_rope}};
    for (auto [a, b] : pairs) {
      ASSERT_EQ(a->shape, b->shape);
      for (size_t i = 0; i < a->data.size(); ++i)
        ASSERT_NEAR(a->data[i], b->data[i], 1e-4f * (1.0f + std::abs(b->data[i])))
            << "layer " << l << " index " << i;
    }
  }
}

TEST(Llama2c, PromptLongerThanSeqLen) {
  REQUIRE_STORIES();
  std::string prompt;
  for (int i = 0; i < 600; ++i) prompt += " cat";
  const std::string e = error_of([&] { llama2c_generate(model(), tokenizer(), prompt, {}); });
  EXPECT_THAT(e, HasSubstr("longer than the model's seq_len 512"));
}

TEST(Llama2c, BadParameters) {
  REQUIRE_STORIES();
  GenerateParams p;
  p.steps = -1;
  EXPECT_THAT(error_of([&] { llama2c_generate(model(), tokenizer(), "a", p); }), HasSubstr("steps"));
  p = {};
  p.temperature = -0.5f;
  EXPECT_THAT(error_of([&] { llama2c_generate(model(), tokenizer(), "a", p); }), HasSubstr("temperature"));
  p = {};
  p.seed = 0;
  EXPECT_THAT(error_of([&] { llama2c_generate(model(), tokenizer(), "a", p); }), HasSubstr("seed"));
}

// ---------------------------------------------------------------------------------------------
// Tokenizer

TEST(Llama2cTokenizer, EncodeDecodeRoundTrip) {
  REQUIRE_STORIES();
  const Llama2cTokenizer& tok = tokenizer();
  for (const std::string text :
       {"Once upon a time", "Lily and Ben went to the park.\nThey played!", "  two  spaces, 3 digits: 042",
        "caf\xC3\xA9 \xE6\x97\xA5\xE6\x9C\xAC \xF0\x9F\x98\x80", "x"}) {
    const std::vector<int32_t> ids = tok.encode(text, /*bos=*/true);
    ASSERT_FALSE(ids.empty());
    EXPECT_EQ(ids[0], Llama2cTokenizer::kBos);
    for (int32_t id : ids) ASSERT_TRUE(id >= 0 && id < tok.size());
    EXPECT_EQ(tok.decode_all(ids), text) << "ids: " << ::testing::PrintToString(ids);
  }
  // Merges happen: an ordinary sentence takes far fewer tokens than bytes.
  EXPECT_LT(tok.encode("Once upon a time there was a girl", true).size(), 20u);
  // Characters the vocabulary lacks fall back to byte tokens (id = byte + 3).
  const auto ids = tok.encode("\xE6\x97\xA5", false);
  EXPECT_EQ(ids.back(), 0xA5 + 3);
  EXPECT_EQ(tok.decode(ids.back() - 1, ids.back()), "\xA5");
  // BOS alone for an empty prompt; the dummy prefix only for non-empty text.
  EXPECT_EQ(tok.encode("", true), std::vector<int32_t>{Llama2cTokenizer::kBos});
  EXPECT_EQ(tok.encode("", false, true), std::vector<int32_t>{Llama2cTokenizer::kEos});
}

TEST(Llama2cTokenizer, DecodeStripsSpaceAfterBosOnly) {
  REQUIRE_STORIES();
  const Llama2cTokenizer& tok = tokenizer();
  const auto ids = tok.encode("Once", true);
  ASSERT_GE(ids.size(), 2u);
  const std::string piece = tok.piece(ids[1]);
  ASSERT_EQ(piece[0], ' ') << "expected the dummy prefix merged into the first piece";
  EXPECT_EQ(tok.decode(Llama2cTokenizer::kBos, ids[1]), piece.substr(1));
  EXPECT_EQ(tok.decode(ids[1], ids[1]), piece);
}

TEST(Llama2cTokenizer, SanitizesBrokenUtf8) {
  REQUIRE_STORIES();
  const Llama2cTokenizer& tok = tokenizer();
  // A lone continuation byte and a control byte, as byte tokens.
  const std::vector<int32_t> ids = {Llama2cTokenizer::kBos, 0x80 + 3, 0x07 + 3, 'A' + 3};
  EXPECT_EQ(tok.decode_all(ids),
            "\xEF\xBF\xBD"
            "A");
}

TEST(Llama2cTokenizer, TruncatedFile) {
  REQUIRE_STORIES();
  std::vector<char> bytes = file_bytes(kTok);
  for (size_t cut : {size_t(2), size_t(1000), bytes.size() - 1}) {
    TempFile f("tok_cut" + std::to_string(cut) + ".bin",
               std::vector<char>(bytes.begin(), bytes.begin() + cut));
    const std::string e = error_of([&] { Llama2cTokenizer(f.path, 512); });
    EXPECT_THAT(e, HasSubstr(f.path));
    EXPECT_THAT(e, HasSubstr("truncated"));
  }
  // The tokenizer of a bigger vocabulary (more entries than the model has).
  const std::string e = error_of([&] { Llama2cTokenizer(kTok, 500); });
  EXPECT_THAT(e, HasSubstr("another model"));
  EXPECT_THAT(error_of([&] { Llama2cTokenizer(kDir + "nope.bin", 512); }), HasSubstr("not found"));
}

// ---------------------------------------------------------------------------------------------
// Model file errors

TEST(Llama2cModelFile, SizeNotMatchingHeader) {
  REQUIRE_STORIES();
  std::vector<char> bytes = file_bytes(kModel);
  const std::string expected = std::to_string(bytes.size());
  {
    TempFile f("cut.bin", std::vector<char>(bytes.begin(), bytes.end() - 4));
    const std::string e = error_of([&] { load_llama2c(f.path); });
    EXPECT_THAT(e, HasSubstr(f.path));
    EXPECT_THAT(e, HasSubstr("size " + std::to_string(bytes.size() - 4) + " bytes"));
    EXPECT_THAT(e, HasSubstr("implies " + expected + " bytes"));
  }
  {
    std::vector<char> longer = bytes;
    longer.resize(bytes.size() + 100);
    TempFile f("long.bin", longer);
    const std::string e = error_of([&] { load_llama2c(f.path); });
    EXPECT_THAT(e, HasSubstr("size " + std::to_string(bytes.size() + 100) + " bytes"));
    EXPECT_THAT(e, HasSubstr("implies " + expected + " bytes"));
  }
  {
    // Flipping vocab_size negative claims an unshared classifier: 512 * 64 more floats.
    std::vector<char> unshared = bytes;
    const int32_t neg = -512;
    std::memcpy(unshared.data() + 5 * 4, &neg, 4);
    TempFile f("unshared.bin", unshared);
    const std::string e = error_of([&] { load_llama2c(f.path); });
    EXPECT_THAT(e, HasSubstr("implies " + std::to_string(bytes.size() + 512 * 64 * 4) + " bytes"));
    EXPECT_THAT(e, HasSubstr("unshared classifier"));
  }
}

TEST(Llama2cModelFile, MissingAndNonsenseHeaders) {
  EXPECT_THAT(error_of([] { load_llama2c("/nonexistent/model.bin"); }),
              HasSubstr("'/nonexistent/model.bin'"));
  EXPECT_THAT(error_of([] { load_llama2c("/nonexistent/model.bin"); }), HasSubstr("not found"));
  auto header = [](std::vector<int32_t> h) {
    std::vector<char> b(h.size() * 4 + 64);
    std::memcpy(b.data(), h.data(), h.size() * 4);
    return b;
  };
  struct Case {
    std::vector<int32_t> h;
    const char* says;
  } cases[] = {
      {{0, 172, 5, 8, 4, 512, 512}, "dim = 0"},
      {{64, 172, 5, 8, 3, 512, 512}, "not a multiple of n_kv_heads"},
      {{64, 172, 5, 7, 7, 512, 512}, "not a multiple of n_heads"},
      {{64, 172, 5, 64, 64, 512, 512}, "odd"},
      {{64, 172, -5, 8, 4, 512, 512}, "n_layers = -5"},
      {{1 << 30, 172, 5, 8, 4, 512, 512}, "dim = "},
      {{64, 172, 5, 8, 4, 512, 0}, "seq_len = 0"},
  };
  for (const Case& c : cases) {
    TempFile f("hdr.bin", header(c.h));
    const std::string e = error_of([&] { load_llama2c(f.path); });
    EXPECT_THAT(e, HasSubstr(f.path));
    EXPECT_THAT(e, HasSubstr(c.says));
  }
  TempFile tiny("tiny.bin", std::vector<char>(10, 0));
  EXPECT_THAT(error_of([&] { load_llama2c(tiny.path); }), HasSubstr("shorter than the 28-byte"));
}

// run.c treats any top_p outside (0, 1) as "off"; kvlab accepts (0, 1] only, so a typo such as
// -0.5 is an error instead of silently sampling the full distribution.
TEST(Sampler, TopPOutsideZeroToOneIsAnError) {
  for (float p : {-0.5f, 0.0f, 1.5f, NAN})
    EXPECT_THROW(kvlab::Sampler(1.0f, p, 42), std::invalid_argument) << p;
  EXPECT_NO_THROW(kvlab::Sampler(1.0f, 1.0f, 42));
  EXPECT_NO_THROW(kvlab::Sampler(1.0f, 0.9f, 42));
}

}  // namespace
