// models hf_model.h, safetensors.h: a tiny random Llama directory written here (config.json,
// model.safetensors) loads and runs; every kind of bad directory is refused with the file and
// the field or tensor named, before a forward can run on it. (Agreement with transformers:
// tests/python/test_hf_runner.py.)
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include <unistd.h>

#include "kvlab/generate.h"
#include "kvlab/hf_model.h"
#include "kvlab/safetensors.h"
#include "tiny_hf_model.h"

namespace {

using namespace kvlab;
using namespace kvlab_test;
using nlohmann::json;
using ::testing::AllOf;
using ::testing::HasSubstr;
namespace fs = std::filesystem;

template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "(no exception)";
}

std::string load_error(const json& config, const Tensors& tensors = tiny_tensors()) {
  ModelDir d(config, tensors);
  return error_of([&] { load_hf_model(d.str()); });
}

TEST(HfModel, TinyLlamaLoadsAndRuns) {
  ModelDir d(tiny_config());
  const HfModel m = load_hf_model(d.str());
  EXPECT_EQ(m.config.architecture, "LlamaForCausalLM");
  EXPECT_EQ(m.config.t.head_dim, 4);
  EXPECT_EQ(m.config.t.rope_style, RopeStyle::Halves);
  EXPECT_EQ(m.config.eos_token_ids, std::vector<int32_t>{2});
  GenerateParams p;
  p.steps = 0;
  const Generation a = generate(m.weights, {1, 5, 9, 30}, p, {}, 64, true, "tiny");
  const Generation b = generate(m.weights, {1, 5, 9, 30}, p, {}, 64, true, "tiny");
  ASSERT_EQ(a.logits.size(), 4u * 32);
  for (float x : a.logits) ASSERT_TRUE(std::isfinite(x));
  EXPECT_EQ(a.logits, b.logits);
  // The prompt as one block or token by token: the same numbers up to summation order.
  TransformerRunner r(m.weights, 4);
  std::vector<float> step;
  const int32_t toks[] = {1, 5, 9, 30};
  for (int i = 0; i < 4; ++i) r.forward(&toks[i], 1, 1, step);
  for (int v = 0; v < 32; ++v) EXPECT_NEAR(step[v], a.logits[3 * 32 + v], 1e-5f * (1 + std::abs(step[v])));
}

TEST(HfModel, TiedEmbeddingsWithOrWithoutAStoredHead) {
  json c = tiny_config();
  c["tie_word_embeddings"] = true;
  Tensors t = tiny_tensors();
  t.erase("lm_head.weight");
  EXPECT_EQ(load_error(c, t), "(no exception)");
  t["lm_head.weight"] = t["model.embed_tokens.weight"];  // stored and equal: fine
  EXPECT_EQ(load_error(c, t), "(no exception)");
}

TEST(HfModel, MissingTensor) {
  Tensors t = tiny_tensors();
  t.erase("model.layers.1.mlp.up_proj.weight");
  EXPECT_THAT(load_error(tiny_config(), t),
              HasSubstr("tensor 'model.layers.1.mlp.up_proj.weight' is missing"));
}

TEST(HfModel, MisshapedTensor) {
  Tensors t = tiny_tensors();
  std::mt19937 rng(1);
  t["model.layers.0.self_attn.k_proj.weight"] = random_f32({8, 15}, rng);
  EXPECT_THAT(load_error(tiny_config(), t),
              AllOf(HasSubstr(
                  "model.safetensors': tensor 'model.layers.0.self_attn.k_proj.weight' has shape (8, 15), "
                  "expected (8, 16)")));
}

TEST(HfModel, UnsupportedDtypes) {
  for (const char* dtype : {"F64", "I32", "F8_E4M3"}) {
    Tensors t = tiny_tensors();
    RawTensor& w = t["model.norm.weight"];
    w.dtype = dtype;
    w.bytes.resize(16 * (dtype[1] == '6' ? 8 : dtype[1] == '3' ? 4 : 1));
    EXPECT_THAT(
        load_error(tiny_config(), t),
        AllOf(HasSubstr("model.safetensors': tensor 'model.norm.weight' has dtype " + std::string(dtype)),
              HasSubstr("reads F32, F16 and BF16")))
        << dtype;
  }
  Tensors t = tiny_tensors();
  t["model.norm.weight"].dtype = "F12";
  EXPECT_THAT(load_error(tiny_config(), t), HasSubstr("tensor 'model.norm.weight': unknown dtype 'F12'"));
}

TEST(HfModel, UnsupportedConfigFeatures) {
  struct Case {
    const char* patch;  // merged into the tiny config
    const char* message;
  };
  const Case cases[] = {
      {R"({"rope_parameters": {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0}})",
       "config.json': rope_parameters has factor"},
      {R"({"rope_parameters": {"rope_type": "linear", "rope_theta": 10000.0}})",
       "rope_parameters has rope_type = \"linear\""},
      {R"({"rope_parameters": null, "rope_scaling": {"type": "dynamic", "factor": 2.0}})",
       "config.json': rope_scaling = {\"factor\":2.0,\"type\":\"dynamic\"}; only null or \"default\""},
      {R"({"num_local_experts": 8, "num_experts_per_tok": 2})", "num_local_experts = 8: mixture-of-experts"},
      {R"({"architectures": ["GemmaForCausalLM"]})", "architectures = GemmaForCausalLM; supported:"},
      {R"({"hidden_act": "gelu"})", "hidden_act = \"gelu\""},
      {R"({"quantization_config": {"quant_method": "gptq"}})", "quantization_config is set"},
      {R"({"hidden_size": null})", "config.json': hidden_size is missing"},
      {R"({"num_key_value_heads": 3})", "num_attention_heads 4 is not a multiple of num_key_value_heads 3"},
      {R"({"layer_types": ["full_attention", "chunked_attention"]})",
       "layer_types has \"chunked_attention\""},
  };
  for (const Case& c : cases) {
    json cfg = tiny_config();
    cfg.merge_patch(json::parse(c.patch));
    EXPECT_THAT(load_error(cfg), HasSubstr(c.message)) << c.patch;
  }
}

TEST(HfModel, SlidingWindowShorterThanTheSequence) {
  json cfg = tiny_config();
  cfg["architectures"] = {"MistralForCausalLM"};
  cfg["sliding_window"] = 8;
  ModelDir d(cfg);
  const HfModel m = load_hf_model(d.str());
  EXPECT_EQ(m.config.sliding_window, 8);
  EXPECT_EQ(error_of([&] { check_hf_sequence(m.config, 8); }), "(no exception)");
  EXPECT_THAT(error_of([&] { check_hf_sequence(m.config, 9); }),
              AllOf(HasSubstr("9 tokens"), HasSubstr("config.json': sliding_window 8")));
  EXPECT_THAT(error_of([&] { check_hf_sequence(m.config, 65); }), HasSubstr("max_position_embeddings 64"));
  cfg["architectures"] = {"Qwen2ForCausalLM"};  // Qwen2: only with use_sliding_window
  Tensors t = tiny_tensors();
  std::mt19937 rng(3);
  for (int l = 0; l < 2; ++l)
    for (auto [name, n] : {std::pair{"q", 16}, {"k", 8}, {"v", 8}})
      t["model.layers." + std::to_string(l) + ".self_attn." + name + "_proj.bias"] = random_f32({n}, rng);
  ModelDir q(cfg, t);
  EXPECT_EQ(load_hf_model(q.str()).config.sliding_window, 0);
}

TEST(HfModel, TiedEmbeddingsAgainstTheHead) {
  json c = tiny_config();  // untied, no head
  Tensors t = tiny_tensors();
  t.erase("lm_head.weight");
  EXPECT_THAT(load_error(c, t),
              AllOf(HasSubstr("tensor 'lm_head.weight' is missing"), HasSubstr("tie_word_embeddings false")));
  c["tie_word_embeddings"] = true;  // tied, but a different head stored
  EXPECT_THAT(load_error(c),
              AllOf(HasSubstr("model.safetensors': lm_head.weight differs from model.embed_tokens.weight"),
                    HasSubstr("tie_word_embeddings true")));
}

TEST(HfModel, UnexpectedTensor) {
  Tensors t = tiny_tensors();
  std::mt19937 rng(2);
  t["model.layers.0.self_attn.q_norm.weight"] = random_f32({4}, rng);  // Qwen3-style, not Llama
  EXPECT_THAT(load_error(tiny_config(), t),
              HasSubstr("unexpected tensor 'model.layers.0.self_attn.q_norm.weight'"));
  t.erase("model.layers.0.self_attn.q_norm.weight");
  t["model.layers.0.self_attn.rotary_emb.inv_freq"] = random_f32({2}, rng);  // old checkpoints: recomputed
  EXPECT_EQ(load_error(tiny_config(), t), "(no exception)");
}

TEST(Safetensors, TruncatedAndBadHeaders) {
  ModelDir d(tiny_config());
  std::vector<uint8_t> good = safetensors_bytes(tiny_tensors());
  auto error_for = [&](const std::vector<uint8_t>& bytes) {
    write_bytes(d.weights(), bytes);
    return error_of([&] { SafetensorsFile f(d.weights()); });
  };
  std::vector<uint8_t> cut(good.begin(), good.end() - 10);
  EXPECT_THAT(error_for(cut),
              AllOf(HasSubstr(d.weights()), HasSubstr("data_offsets"), HasSubstr("truncated")));
  EXPECT_THAT(error_for({1, 2, 3}), HasSubstr("shorter than the 8-byte safetensors header length"));
  std::vector<uint8_t> past = good;
  past[5] = 1;  // a header length of 2^40
  EXPECT_THAT(error_for(past), AllOf(HasSubstr(d.weights()), HasSubstr("runs past the end of the file")));
  std::vector<uint8_t> not_json = good;
  not_json[8] = '!';
  EXPECT_THAT(error_for(not_json), HasSubstr("the header is not valid JSON"));
  // a header whose ranges overlap and one whose bytes do not fit dtype and shape
  Tensors two;
  std::mt19937 rng(4);
  two["a"] = random_f32({4}, rng);
  two["b"] = random_f32({4}, rng);
  std::vector<uint8_t> bytes = safetensors_bytes(two);
  std::string s(bytes.begin(), bytes.end());
  s.replace(s.find("[16,32]"), 7, "[8 ,24 ]");
  EXPECT_THAT(error_for(std::vector<uint8_t>(s.begin(), s.end())), HasSubstr("tensors 'a' and 'b' overlap"));
  s = std::string(bytes.begin(), bytes.end());
  s.replace(s.find("\"shape\":[4]"), 11, "\"shape\":[5]");
  EXPECT_THAT(error_for(std::vector<uint8_t>(s.begin(), s.end())),
              HasSubstr("tensor 'a': data_offsets cover 16 bytes, but dtype F32 and shape (5,) need 20"));
  s = std::string(bytes.begin(), bytes.end());
  s.replace(s.find("\"shape\":[4]"), 11, "\"shape\":[-4]");  // the header's padding absorbs the extra byte
  EXPECT_THAT(error_for(std::vector<uint8_t>(s.begin(), s.end())),
              HasSubstr("tensor 'a': shape [-4] has an entry that is not a size"));
}

TEST(HfModel, ShardIndex) {
  ModelDir d(tiny_config());
  fs::rename(d.dir / "model.safetensors", d.dir / "part-1.safetensors");
  json map = json::object();
  for (const auto& [name, t] : tiny_tensors()) map[name] = "part-1.safetensors";
  auto write_index = [&](const json& m) {
    std::ofstream(d.dir / "model.safetensors.index.json") << json{{"weight_map", m}}.dump();
  };
  write_index(map);
  EXPECT_EQ(error_of([&] { load_hf_model(d.str()); }), "(no exception)");
  json outside = map;
  outside["model.norm.weight"] = "../part-1.safetensors";
  write_index(outside);
  EXPECT_THAT(error_of([&] { load_hf_model(d.str()); }), HasSubstr("is not a file in the directory"));
  json wrong = map;
  wrong["model.norm.weight"] = "part-2.safetensors";
  write_bytes(d.dir / "part-2.safetensors", safetensors_bytes({}));
  write_index(wrong);
  EXPECT_THAT(
      error_of([&] { load_hf_model(d.str()); }),
      HasSubstr("weight_map puts 'model.norm.weight' in 'part-2.safetensors', which has no such tensor"));
  fs::remove(d.dir / "model.safetensors.index.json");
  EXPECT_THAT(error_of([&] { load_hf_model(d.str()); }),
              HasSubstr("no model.safetensors or model.safetensors.index.json"));
}

}  // namespace
