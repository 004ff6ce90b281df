// config.json of a Llama-family checkpoint: the decoder's shapes and constants, and a refusal,
// naming the field, of every setting the decoder does not implement.
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "kvlab/hf_model.h"

namespace kvlab {
namespace {

using nlohmann::json;

json read_json(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("'" + path + "': cannot read the file");
  try {
    return json::parse(in);
  } catch (const json::exception& e) {
    throw std::runtime_error("'" + path + "': not valid JSON: " + e.what());
  }
}

struct Fields {
  const json& j;
  std::string path, prefix;  // prefix: the enclosing object ("rope_parameters.")
  [[noreturn]] void fail(const std::string& key, const std::string& what) const {
    throw std::runtime_error("'" + path + "': " + prefix + key + " " + what);
  }
  bool has(const std::string& key) const { return j.contains(key) && !j[key].is_null(); }
  int64_t size(const std::string& key, int64_t hi) const {
    if (!has(key)) fail(key, "is missing");
    if (!j[key].is_number_integer()) fail(key, "is not an integer: " + j[key].dump());
    const int64_t v = j[key].get<int64_t>();
    if (v <= 0 || v > hi) fail(key, "= " + std::to_string(v) + " is outside 1.." + std::to_string(hi));
    return v;
  }
  double number(const std::string& key) const {
    if (!has(key)) fail(key, "is missing");
    if (!j[key].is_number()) fail(key, "is not a number: " + j[key].dump());
    const double v = j[key].get<double>();
    if (!(v > 0) || !std::isfinite(v)) fail(key, "= " + j[key].dump() + " must be a positive number");
    return v;
  }
  bool flag(const std::string& key, bool dflt) const {
    if (!has(key)) return dflt;
    if (!j[key].is_boolean()) fail(key, "is not true or false: " + j[key].dump());
    return j[key].get<bool>();
  }
};

// rope_parameters (transformers >= 5) or rope_theta with rope_scaling (earlier): default RoPE only.
float rope_theta(const Fields& f) {
  const json& j = f.j;
  if (f.has("rope_parameters")) {
    const json& p = j["rope_parameters"];
    if (!p.is_object()) f.fail("rope_parameters", "is not an object");
    for (const auto& [k, v] : p.items()) {
      if (k == "rope_theta") continue;
      if (k == "rope_type" && v == "default") continue;
      if (k == "partial_rotary_factor" && v.is_number() && v.get<double>() == 1.0) continue;
      f.fail("rope_parameters",
             "has " + k + " = " + v.dump() + "; only default RoPE (rope_type \"default\") is implemented");
    }
    return (float)Fields{p, f.path, "rope_parameters."}.number("rope_theta");
  }
  if (f.has("rope_scaling")) {
    const json& s = j["rope_scaling"];
    const std::string type = s.is_object() ? s.value("rope_type", s.value("type", std::string())) : "";
    if (type != "default")
      f.fail("rope_scaling", "= " + s.dump() + "; only null or \"default\" is implemented");
  }
  return f.has("rope_theta") ? (float)f.number("rope_theta") : 10000.0f;
}

std::vector<int32_t> token_ids(const Fields& f, const std::string& key) {
  std::vector<int32_t> ids;
  if (!f.has(key)) return ids;
  const json& v = f.j[key];
  for (const json& e : v.is_array() ? v : json::array({v})) {
    if (!e.is_number_integer()) f.fail(key, "is not a token id or a list of them: " + v.dump());
    ids.push_back(e.get<int32_t>());
  }
  return ids;
}

}  // namespace

HfConfig read_hf_config(const std::string& dir) {
  namespace fs = std::filesystem;
  const std::string path = (fs::path(dir) / "config.json").string();
  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    throw std::runtime_error("'" + dir + "': not a directory (a Hugging Face model directory)");
  if (!fs::exists(path, ec))
    throw std::runtime_error("'" + path + "': not found (a Hugging Face model directory has config.json)");
  const json j = read_json(path);
  if (!j.is_object()) throw std::runtime_error("'" + path + "': not a JSON object");
  const Fields f{j, path, ""};

  HfConfig c;
  c.dir = dir;
  if (!f.has("architectures") || !j["architectures"].is_array() || j["architectures"].size() != 1 ||
      !j["architectures"][0].is_string())
    f.fail("architectures", "must be a list of one name, got " +
                                (f.has("architectures") ? j["architectures"].dump() : "nothing"));
  c.architecture = j["architectures"][0].get<std::string>();
  const bool llama = c.architecture == "LlamaForCausalLM", mistral = c.architecture == "MistralForCausalLM",
             qwen2 = c.architecture == "Qwen2ForCausalLM";
  if (!llama && !mistral && !qwen2)
    f.fail("architectures",
           "= " + c.architecture + "; supported: LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM");
  for (const char* key : {"num_local_experts", "num_experts", "n_routed_experts", "num_experts_per_tok",
                          "moe_intermediate_size"})
    if (f.has(key) && !(j[key].is_number() && j[key].get<double>() == 0))
      f.fail(key, "= " + j[key].dump() + ": mixture-of-experts models are not supported");
  if (f.has("quantization_config"))
    f.fail("quantization_config", "is set: quantized checkpoints are not supported");
  if (f.has("hidden_act") && j["hidden_act"] != "silu")
    f.fail("hidden_act", "= " + j["hidden_act"].dump() + "; only silu (SwiGLU) is implemented");

  TransformerConfig& t = c.t;
  t.dim = f.size("hidden_size", 1 << 16);
  t.hidden_dim = f.size("intermediate_size", 1 << 18);
  t.n_layers = f.size("num_hidden_layers", 1024);
  t.n_heads = f.size("num_attention_heads", 1024);
  t.n_kv_heads = f.has("num_key_value_heads") ? f.size("num_key_value_heads", 1024) : t.n_heads;
  t.head_dim = f.has("head_dim") ? f.size("head_dim", 4096) : t.dim / t.n_heads;
  t.vocab_size = f.size("vocab_size", 1 << 22);
  t.norm_eps = (float)f.number("rms_norm_eps");
  t.rope_theta = rope_theta(f);
  t.rope_style = RopeStyle::Halves;
  if (!f.has("head_dim") && t.dim % t.n_heads != 0)
    f.fail("hidden_size", std::to_string(t.dim) + " is not a multiple of num_attention_heads " +
                              std::to_string(t.n_heads) + " (and head_dim is not given)");
  if (t.n_heads % t.n_kv_heads != 0)
    f.fail("num_attention_heads", std::to_string(t.n_heads) + " is not a multiple of num_key_value_heads " +
                                      std::to_string(t.n_kv_heads));
  if (t.head_dim % 2 != 0) f.fail("head_dim", std::to_string(t.head_dim) + " is odd (RoPE rotates pairs)");
  c.max_position_embeddings = f.size("max_position_embeddings", 1 << 24);

  c.qkv_bias = qwen2 || f.flag("attention_bias", false);  // Qwen2: q/k/v biases, none on o
  c.o_bias = !qwen2 && f.flag("attention_bias", false);
  c.mlp_bias = f.flag("mlp_bias", false);
  c.tie_word_embeddings = f.flag("tie_word_embeddings", false);

  // Mistral applies sliding_window to every layer; Qwen2 only with use_sliding_window (to the
  // layers layer_types marks as sliding_attention).
  bool sliding = (mistral || (qwen2 && f.flag("use_sliding_window", false))) && f.has("sliding_window");
  if (f.has("layer_types")) {
    if (!j["layer_types"].is_array()) f.fail("layer_types", "is not a list");
    for (const json& lt : j["layer_types"]) {
      if (lt == "sliding_attention") {
        sliding = true;
      } else if (lt != "full_attention") {
        f.fail("layer_types", "has " + lt.dump() + "; full_attention and sliding_attention are known");
      }
    }
  }
  if (sliding) c.sliding_window = f.size("sliding_window", 1 << 24);

  c.eos_token_ids = token_ids(f, "eos_token_id");
  const std::string gen_path = (fs::path(dir) / "generation_config.json").string();
  if (fs::exists(gen_path, ec)) {
    const json g = read_json(gen_path);
    const Fields gf{g, gen_path, ""};
    if (g.is_object() && gf.has("eos_token_id")) c.eos_token_ids = token_ids(gf, "eos_token_id");
  }
  return c;
}

void check_hf_sequence(const HfConfig& c, int64_t tokens) {
  const std::string where = "'" + c.dir + "/config.json': ";
  if (tokens > c.max_position_embeddings)
    throw std::invalid_argument("the sequence is " + std::to_string(tokens) + " tokens, more than " + where +
                                "max_position_embeddings " + std::to_string(c.max_position_embeddings));
  if (c.sliding_window > 0 && tokens > c.sliding_window)
    throw std::invalid_argument("the sequence is " + std::to_string(tokens) + " tokens, more than " + where +
                                "sliding_window " + std::to_string(c.sliding_window) +
                                " (the runner has no sliding-window mask)");
}

}  // namespace kvlab
