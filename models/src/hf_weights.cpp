// The weights of a Hugging Face checkpoint: which files (one safetensors file or an index of
// shards), which tensors the architecture needs and their shapes, all checked before any
// weight is read; then each tensor copied out as fp32.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "kvlab/hf_model.h"
#include "kvlab/safetensors.h"
#include "kvlab/tensor.h"

namespace kvlab {
namespace {

namespace fs = std::filesystem;

// Every tensor name in a safetensors file or shard index, with the file that holds it.
struct Files {
  std::vector<std::unique_ptr<SafetensorsFile>> files;
  std::map<std::string, const SafetensorsFile*> where;
};

Files open_files(const std::string& dir) {
  const fs::path single = fs::path(dir) / "model.safetensors",
                 index = fs::path(dir) / "model.safetensors.index.json";
  Files f;
  std::error_code ec;
  if (fs::exists(index, ec)) {
    const std::string ip = index.string();
    nlohmann::json j;
    std::ifstream in(ip, std::ios::binary);
    try {
      j = nlohmann::json::parse(in);
    } catch (const nlohmann::json::exception& e) {
      throw std::runtime_error("'" + ip + "': not valid JSON: " + e.what());
    }
    if (!j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object())
      throw std::runtime_error("'" + ip + "': weight_map is missing or not an object");
    std::map<std::string, const SafetensorsFile*> by_file;
    for (const auto& [name, file] : j["weight_map"].items()) {
      if (!file.is_string())
        throw std::runtime_error("'" + ip + "': weight_map['" + name + "'] is not a file name");
      const std::string shard = file.get<std::string>();
      // A plain file name beside the index: nothing outside the directory is opened.
      if (shard.empty() || shard.find('/') != std::string::npos || shard == "." || shard == "..")
        throw std::runtime_error("'" + ip + "': weight_map['" + name + "'] = '" + shard +
                                 "' is not a file in the directory");
      if (!by_file.count(shard)) {
        f.files.push_back(std::make_unique<SafetensorsFile>((fs::path(dir) / shard).string()));
        by_file[shard] = f.files.back().get();
      }
      if (!by_file[shard]->contains(name))
        throw std::runtime_error("'" + ip + "': weight_map puts '" + name + "' in '" + shard +
                                 "', which has no such tensor");
      f.where[name] = by_file[shard];
    }
    for (const auto& file : f.files)
      for (const auto& [name, e] : file->entries())
        if (!f.where.count(name))
          throw std::runtime_error("'" + file->path() + "': tensor '" + name + "' is not in '" + ip +
                                   "' weight_map");
  } else if (fs::exists(single, ec)) {
    f.files.push_back(std::make_unique<SafetensorsFile>(single.string()));
    for (const auto& [name, e] : f.files.back()->entries()) f.where[name] = f.files.back().get();
  } else {
    throw std::runtime_error(
        "'" + dir +
        "': no model.safetensors or model.safetensors.index.json (only safetensors weights are read)");
  }
  return f;
}

struct Want {
  std::string name;
  std::vector<int64_t> shape;
  const float** slot;  // where the TransformerWeights pointer goes
};

std::vector<Want> wanted(const HfConfig& c, TransformerWeights& w) {
  const TransformerConfig& t = c.t;
  const int64_t q_dim = t.n_heads * t.head_dim, kv_dim = t.n_kv_heads * t.head_dim;
  std::vector<Want> v = {{"model.embed_tokens.weight", {t.vocab_size, t.dim}, &w.embedding},
                         {"model.norm.weight", {t.dim}, &w.final_norm}};
  if (!c.tie_word_embeddings) v.push_back({"lm_head.weight", {t.vocab_size, t.dim}, &w.classifier});
  w.layers.resize(t.n_layers);
  for (int64_t l = 0; l < t.n_layers; ++l) {
    LayerWeights& L = w.layers[l];
    const std::string p = "model.layers." + std::to_string(l) + ".";
    auto add = [&](const std::string& name, std::vector<int64_t> shape, const float** slot) {
      v.push_back({p + name, std::move(shape), slot});
    };
    add("input_layernorm.weight", {t.dim}, &L.attn_norm);
    add("self_attn.q_proj.weight", {q_dim, t.dim}, &L.wq);
    add("self_attn.k_proj.weight", {kv_dim, t.dim}, &L.wk);
    add("self_attn.v_proj.weight", {kv_dim, t.dim}, &L.wv);
    add("self_attn.o_proj.weight", {t.dim, q_dim}, &L.wo);
    if (c.qkv_bias) {
      add("self_attn.q_proj.bias", {q_dim}, &L.bq);
      add("self_attn.k_proj.bias", {kv_dim}, &L.bk);
      add("self_attn.v_proj.bias", {kv_dim}, &L.bv);
    }
    if (c.o_bias) add("self_attn.o_proj.bias", {t.dim}, &L.bo);
    add("post_attention_layernorm.weight", {t.dim}, &L.ffn_norm);
    add("mlp.gate_proj.weight", {t.hidden_dim, t.dim}, &L.w_gate);
    add("mlp.up_proj.weight", {t.hidden_dim, t.dim}, &L.w_up);
    add("mlp.down_proj.weight", {t.dim, t.hidden_dim}, &L.w_down);
    if (c.mlp_bias) {
      add("mlp.gate_proj.bias", {t.hidden_dim}, &L.b_gate);
      add("mlp.up_proj.bias", {t.hidden_dim}, &L.b_up);
      add("mlp.down_proj.bias", {t.dim}, &L.b_down);
    }
  }
  return v;
}

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

}  // namespace

HfModel load_hf_model(const std::string& dir) {
  HfModel m;
  m.config = read_hf_config(dir);
  const HfConfig& c = m.config;
  const Files files = open_files(dir);
  const std::vector<Want> want = wanted(c, m.weights);
  const std::string cfg = "'" + dir + "/config.json' (" + c.architecture + ")";

  // Everything is checked before anything is read.
  std::map<std::string, bool> expected;
  for (const Want& w : want) {
    expected[w.name] = true;
    const auto it = files.where.find(w.name);
    if (it == files.where.end())
      throw std::runtime_error("'" + dir + "': tensor '" + w.name + "' is missing (needed by " + cfg +
                               (w.name == "lm_head.weight" ? ", tie_word_embeddings false)" : ")"));
    const SafetensorsEntry& e = it->second->entries().at(w.name);
    if (e.shape != w.shape)
      throw std::runtime_error("'" + it->second->path() + "': tensor '" + w.name + "' has shape " +
                               shape_string(e.shape) + ", expected " + shape_string(w.shape) + " from " +
                               cfg);
    if (e.dtype != "F32" && e.dtype != "F16" && e.dtype != "BF16")
      throw std::runtime_error("'" + it->second->path() + "': tensor '" + w.name + "' has dtype " + e.dtype +
                               "; the runner reads F32, F16 and BF16");
  }
  for (const auto& [name, file] : files.where) {
    if (expected.count(name) || ends_with(name, ".rotary_emb.inv_freq")) continue;  // RoPE is recomputed
    if (name == "lm_head.weight" && c.tie_word_embeddings) continue;                // compared below
    throw std::runtime_error("'" + file->path() + "': unexpected tensor '" + name + "' for " + cfg +
                             " (a feature the runner does not implement?)");
  }

  for (const Want& w : want) {
    m.storage.push_back(files.where.at(w.name)->read_f32(w.name, w.shape));
    *w.slot = m.storage.back().data();
  }
  m.weights.config = c.t;
  if (c.tie_word_embeddings) {
    m.weights.classifier = m.weights.embedding;
    const auto head = files.where.find("lm_head.weight");
    if (head != files.where.end()) {  // a tied model may store the head; it must be the embedding
      const std::vector<float> h = head->second->read_f32("lm_head.weight", {c.t.vocab_size, c.t.dim});
      if (!std::equal(h.begin(), h.end(), m.weights.embedding))
        throw std::runtime_error("'" + head->second->path() +
                                 "': lm_head.weight differs from model.embed_tokens.weight, but " + cfg +
                                 " has tie_word_embeddings true");
    }
  }
  return m;
}

}  // namespace kvlab
