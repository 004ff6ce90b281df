// A tiny random Llama-family Hugging Face directory written by a test (config.json,
// model.safetensors), for tests of the Hugging Face runner and what is built on it.
#pragma once
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include <unistd.h>

namespace kvlab_test {

using nlohmann::json;
namespace fs = std::filesystem;

struct RawTensor {
  std::string dtype = "F32";
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;
};
using Tensors = std::map<std::string, RawTensor>;

inline RawTensor random_f32(std::vector<int64_t> shape, std::mt19937& rng, float mean = 0.0f) {
  std::normal_distribution<float> d(mean, 0.2f);
  RawTensor t{"F32", shape, {}};
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  t.bytes.resize(n * 4);
  for (int64_t i = 0; i < n; ++i) {
    const float v = d(rng);
    std::memcpy(t.bytes.data() + 4 * i, &v, 4);
  }
  return t;
}

// Hidden 16, 2 layers, 4 q / 2 kv heads of 4, SwiGLU 24, vocab 32.
inline json tiny_config() {
  return json::parse(R"({"architectures": ["LlamaForCausalLM"], "hidden_size": 16, "intermediate_size": 24,
    "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 32,
    "max_position_embeddings": 64, "rms_norm_eps": 1e-5, "hidden_act": "silu", "tie_word_embeddings": false,
    "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0}, "eos_token_id": 2})");
}

// tiny_config()'s weights; `vocab` rows of embeddings and lm_head (the config's vocab_size).
inline Tensors tiny_tensors(int64_t vocab = 32) {
  std::mt19937 rng(7);
  Tensors t;
  t["model.embed_tokens.weight"] = random_f32({vocab, 16}, rng);
  t["lm_head.weight"] = random_f32({vocab, 16}, rng);
  t["model.norm.weight"] = random_f32({16}, rng, 1.0f);
  for (int l = 0; l < 2; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    t[p + "input_layernorm.weight"] = random_f32({16}, rng, 1.0f);
    t[p + "post_attention_layernorm.weight"] = random_f32({16}, rng, 1.0f);
    t[p + "self_attn.q_proj.weight"] = random_f32({16, 16}, rng);
    t[p + "self_attn.k_proj.weight"] = random_f32({8, 16}, rng);
    t[p + "self_attn.v_proj.weight"] = random_f32({8, 16}, rng);
    t[p + "self_attn.o_proj.weight"] = random_f32({16, 16}, rng);
    t[p + "mlp.gate_proj.weight"] = random_f32({24, 16}, rng);
    t[p + "mlp.up_proj.weight"] = random_f32({24, 16}, rng);
    t[p + "mlp.down_proj.weight"] = random_f32({16, 24}, rng);
  }
  return t;
}

inline std::vector<uint8_t> safetensors_bytes(const Tensors& tensors) {
  json h = json::object();
  uint64_t off = 0;
  std::vector<uint8_t> data;
  for (const auto& [name, t] : tensors) {
    h[name] = {{"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {off, off + t.bytes.size()}}};
    data.insert(data.end(), t.bytes.begin(), t.bytes.end());
    off += t.bytes.size();
  }
  std::string header = h.dump();
  header.resize((header.size() + 7) / 8 * 8, ' ');
  std::vector<uint8_t> out(8 + header.size() + data.size());
  for (int i = 0; i < 8; ++i) out[i] = (uint8_t)((uint64_t)header.size() >> (8 * i));
  std::memcpy(out.data() + 8, header.data(), header.size());
  if (!data.empty()) std::memcpy(out.data() + 8 + header.size(), data.data(), data.size());
  return out;
}

inline void write_bytes(const fs::path& p, const std::vector<uint8_t>& b) {
  std::ofstream(p, std::ios::binary).write((const char*)b.data(), (std::streamsize)b.size());
}

// A model directory in the temp folder, removed when the test ends.
struct ModelDir {
  fs::path dir;
  explicit ModelDir(const json& config, const Tensors& tensors = tiny_tensors()) {
    static int count = 0;  // one per test binary: the pid keeps binaries apart
    dir =
        fs::temp_directory_path() / ("kvlab_hf_" + std::to_string(getpid()) + "_" + std::to_string(count++));
    fs::create_directories(dir);
    std::ofstream(dir / "config.json") << config.dump(2);
    write_bytes(dir / "model.safetensors", safetensors_bytes(tensors));
  }
  ~ModelDir() { fs::remove_all(dir); }
  std::string str() const { return dir.string(); }
  std::string weights() const { return (dir / "model.safetensors").string(); }
};

}  // namespace kvlab_test
