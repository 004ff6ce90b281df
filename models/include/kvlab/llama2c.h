// A built-in runner for llama2.c checkpoints (Karpathy's run.c, legacy version-0 format): load
// the model and its BPE tokenizer, generate a continuation of a prompt in fp32, and capture the
// q, k (after RoPE), k_pre_rope and v of every layer at every position as a KV dump
// (docs/DUMP_FORMAT.md). The arithmetic follows run.c, so greedy output matches it.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "kvlab/dump.h"

namespace kvlab {

// The 7-int32 header of a version-0 checkpoint.
struct Llama2cConfig {
  int32_t dim = 0;         // model width
  int32_t hidden_dim = 0;  // SwiGLU width
  int32_t n_layers = 0;
  int32_t n_heads = 0;            // query heads
  int32_t n_kv_heads = 0;         // key/value heads (GQA when fewer than n_heads)
  int32_t vocab_size = 0;         // stored negative in the file when the classifier is unshared
  int32_t seq_len = 0;            // the longest sequence the model was trained on
  bool shared_classifier = true;  // the output classifier is the token embedding

  int32_t head_dim() const { return dim / n_heads; }
  int32_t kv_dim() const { return n_kv_heads * head_dim(); }
};

// fp32 weights in run.c's order; each matrix (rows, cols) row-major, output rows first.
struct Llama2cModel {
  std::string path;
  Llama2cConfig config;
  std::vector<float> weights;  // the file after the header, as read
  // Offsets into `weights` (in floats) of each block; per-layer blocks are stacked over layers.
  size_t token_embedding = 0, rms_att = 0, wq = 0, wk = 0, wv = 0, wo = 0, rms_ffn = 0, w1 = 0, w2 = 0,
         w3 = 0, rms_final = 0, wcls = 0;
};

// Bytes a checkpoint with this header must have (header included).
uint64_t llama2c_expected_bytes(const Llama2cConfig& c);
// Throws std::runtime_error naming the file for a missing file, a nonsense header, or a size
// other than what the header implies (expected and found bytes).
Llama2cModel load_llama2c(const std::string& path);

// run.c's tokenizer file: int32 max_token_length, then per token: float32 score, int32 length,
// that many bytes. The file does not store the vocabulary size; the model's is used.
class Llama2cTokenizer {
 public:
  static constexpr int kBos = 1, kEos = 2;
  // Throws std::runtime_error naming the file when it is missing, truncated, or longer than
  // `vocab_size` entries (a tokenizer of another model).
  Llama2cTokenizer(const std::string& path, int32_t vocab_size);

  // run.c's encode(): optional BOS, a dummy-prefix space for non-empty text, UTF-8 code points
  // (bytes as <0xXX> tokens when unknown), then greedy merges of the best-scoring pair.
  std::vector<int32_t> encode(const std::string& text, bool bos, bool eos = false) const;
  // run.c's decode(): the piece of `token`, without its leading space right after BOS, and the
  // raw byte for <0xXX> pieces.
  std::string decode(int32_t prev_token, int32_t token) const;
  // The decoded text of a whole sequence, made valid UTF-8 (bad bytes become U+FFFD) and
  // without control characters other than tab, newline and carriage return.
  std::string decode_all(const std::vector<int32_t>& tokens) const;

  int32_t size() const { return (int32_t)pieces_.size(); }
  const std::string& piece(int32_t id) const { return pieces_.at(id); }
  float score(int32_t id) const { return scores_.at(id); }

 private:
  int32_t lookup(const std::string& s) const;  // -1 when absent
  std::string path_;
  std::vector<std::string> pieces_;
  std::vector<float> scores_;
  std::vector<int32_t> sorted_;  // ids sorted by piece, then id, for binary search
  int32_t max_token_length_ = 0;
};

// The q, k, k_pre_rope and v one forward step produced, per layer, position-major: entry
// [layer][role] grows by heads * head_dim floats per position.
struct Llama2cCapture {
  std::vector<std::vector<float>> q, k, k_pre_rope, v;  // [layer] -> (T, heads, head_dim)
};

// run.c's forward pass for one token at one position, keeping its own KV cache.
class Llama2cRunner {
 public:
  explicit Llama2cRunner(const Llama2cModel& model);
  // Returns the logits (vocab_size). Positions must come in order 0, 1, 2, ... < seq_len.
  // When `capture` is given, this position's q/k/k_pre_rope/v are appended to it.
  const std::vector<float>& forward(int32_t token, int32_t pos, Llama2cCapture* capture = nullptr);

 private:
  const Llama2cModel& m_;
  std::vector<float> x_, xb_, xb2_, hb_, hb2_, q_, att_, logits_;
  std::vector<float> key_cache_, value_cache_;  // (layer, seq_len, kv_dim)
};

struct Llama2cGenerateParams {
  int32_t steps = 256;       // tokens to generate after the prompt
  float temperature = 0.0f;  // 0: greedy (argmax, ties to the lowest id)
  float top_p = 1.0f;        // nucleus sampling when in (0, 1); 1: the full distribution
  uint64_t seed = 42;        // xorshift state as run.c's; must be nonzero
};

struct Llama2cGeneration {
  std::vector<int32_t> tokens;  // BOS, the prompt, the generated tokens; every one was forwarded
  int32_t prompt_tokens = 0;    // BOS included
  bool stopped_on_bos = false;  // the model chose BOS (run.c stops there) before `steps`
  std::string text;             // decoded tokens (Llama2cTokenizer::decode_all)
  std::vector<LayerKV> kv;      // per layer: q (Hq, T, D), k, v, k_pre_rope (Hkv, T, D)
};

// Runs the prompt, then continues up to params.steps tokens, stopping early when the model
// chooses BOS or the sequence reaches seq_len. Throws std::invalid_argument for a prompt
// longer than seq_len, a negative step count or temperature, or a zero seed.
Llama2cGeneration llama2c_generate(const Llama2cModel& model, const Llama2cTokenizer& tokenizer,
                                   const std::string& prompt, const Llama2cGenerateParams& params);

// The sampler of run.c: argmax at temperature 0, else softmax(logits / temperature) sampled with
// a xorshift RNG, over the top-p nucleus when 0 < top_p < 1. `logits` is overwritten.
class Llama2cSampler {
 public:
  Llama2cSampler(float temperature, float top_p, uint64_t seed);
  int32_t sample(std::vector<float>& logits);
  float random_f32();  // in [0, 1), from the next 24 random bits

 private:
  float temperature_, top_p_;
  uint64_t state_;
};

// The DumpInfo of a generation (dtype float32, RoPE adjacent, theta 10000, k_pre_rope present).
DumpInfo llama2c_dump_info(const Llama2cModel& model, const Llama2cGeneration& gen,
                           const std::string& model_name, const std::string& source);
// Writes the generation to `path` through DumpWriter.
void write_llama2c_dump(const std::string& path, const Llama2cModel& model, const Llama2cGeneration& gen,
                        const std::string& model_name, const std::string& source,
                        DumpWriteOptions options = {});

}  // namespace kvlab
