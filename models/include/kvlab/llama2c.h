// llama2.c checkpoints (Karpathy's run.c, legacy version-0 format): load the model and its BPE
// tokenizer, generate a continuation of a prompt in fp32 through the shared decoder
// (transformer.h), and capture the q, k (after RoPE), k_pre_rope and v of every layer at every
// position as a KV dump (docs/DUMP_FORMAT.md). The arithmetic is run.c's up to the summation
// order of the matrix products, so greedy output matches it.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "kvlab/dump.h"
#include "kvlab/generate.h"

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

// The model's weights as the shared decoder reads them (adjacent RoPE, theta 10000, eps 1e-5).
TransformerWeights llama2c_weights(const Llama2cModel& model);

// Runs the prompt (BOS prepended), then continues up to params.steps tokens, stopping early when
// the model chooses BOS (as run.c does) or the sequence reaches seq_len. Throws
// std::invalid_argument for a prompt longer than seq_len, a negative step count or temperature,
// or a zero seed.
Generation llama2c_generate(const Llama2cModel& model, const Llama2cTokenizer& tokenizer,
                            const std::string& prompt, const GenerateParams& params);

// The DumpInfo of a generation (dtype float32, RoPE adjacent, theta 10000, k_pre_rope present).
DumpInfo llama2c_dump_info(const Llama2cModel& model, const Generation& gen, const std::string& model_name,
                           const std::string& source);
// Writes the generation to `path` through DumpWriter.
void write_llama2c_dump(const std::string& path, const Llama2cModel& model, const Generation& gen,
                        const std::string& model_name, const std::string& source,
                        DumpWriteOptions options = {});

}  // namespace kvlab
