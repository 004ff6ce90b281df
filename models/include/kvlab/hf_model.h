// Hugging Face Llama-family checkpoints: a directory with config.json and model.safetensors (or
// model.safetensors.index.json and its shards), architectures LlamaForCausalLM,
// MistralForCausalLM and Qwen2ForCausalLM, weights in F32, F16 or BF16, run in fp32 through the
// shared decoder (transformer.h) with RoPE in the halves layout. Anything the decoder does not
// implement (RoPE scaling, MoE, quantization, a sliding window shorter than the sequence) is
// refused with the file and field named (docs/FORMATS.md, "Hugging Face checkpoints").
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "kvlab/generate.h"
#include "kvlab/transformer.h"

namespace kvlab {

struct HfConfig {
  std::string dir, architecture;
  TransformerConfig t;  // shapes, eps, theta; rope_style halves
  bool qkv_bias = false, o_bias = false, mlp_bias = false;
  bool tie_word_embeddings = false;
  int64_t max_position_embeddings = 0;
  int64_t sliding_window = 0;          // 0: every layer attends to every earlier position
  std::vector<int32_t> eos_token_ids;  // generation stops there (generation_config.json first)
};

// Reads DIR/config.json (and DIR/generation_config.json for eos_token_id when present). Throws
// std::runtime_error naming the file and field for anything missing, malformed or unsupported.
HfConfig read_hf_config(const std::string& dir);

// Throws std::invalid_argument when `tokens` positions are more than the model takes: beyond
// max_position_embeddings, or beyond a sliding window (whose mask the decoder does not apply).
void check_hf_sequence(const HfConfig& c, int64_t tokens);

// The model in fp32; `weights` points into `storage`, so an HfModel moves but is not copied.
struct HfModel {
  HfConfig config;
  std::vector<std::vector<float>> storage;
  TransformerWeights weights;
  HfModel() = default;
  HfModel(HfModel&&) = default;
  HfModel& operator=(HfModel&&) = default;
  HfModel(const HfModel&) = delete;
  HfModel& operator=(const HfModel&) = delete;
};

// Every tensor's presence, dtype and shape is checked in every file before weights are read.
// Throws std::runtime_error naming the directory or file and the tensor: missing, misshaped,
// unsupported dtype, unexpected (a feature the decoder lacks), lm_head against
// tie_word_embeddings, bad shard index.
HfModel load_hf_model(const std::string& dir);

// The DumpInfo of a generation (dtype float32, RoPE halves, the config's theta, k_pre_rope present).
DumpInfo hf_dump_info(const HfModel& model, const Generation& gen, const std::string& model_name,
                      const std::string& source);

}  // namespace kvlab
