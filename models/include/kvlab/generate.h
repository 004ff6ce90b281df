// Generation with the shared decoder: run the prompt as one block, continue one token at a time
// with run.c's sampler, and keep every position's q/k/v for a dump. Both checkpoint kinds
// (llama2.c, Hugging Face) use it.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "kvlab/dump.h"
#include "kvlab/transformer.h"

namespace kvlab {

struct GenerateParams {
  int32_t steps = 256;       // tokens to generate after the prompt
  float temperature = 0.0f;  // 0: greedy (argmax, ties to the lowest id)
  float top_p = 1.0f;        // nucleus sampling when in (0, 1); otherwise the full distribution
  uint64_t seed = 42;        // xorshift state as run.c's; must be nonzero
};

struct Generation {
  std::vector<int32_t> tokens;  // the prompt, then the generated tokens; every one was forwarded
  int32_t prompt_tokens = 0;
  bool stopped = false;       // the model chose a stop token (not appended) before `steps`
  std::string text;           // decoded tokens (set by the caller, who has the tokenizer)
  std::vector<LayerKV> kv;    // per layer: q (Hq, T, D), k, v, k_pre_rope (Hkv, T, D)
  std::vector<float> logits;  // (T, vocab) of every position, when asked for
};

// Runs `prompt` (non-empty), then samples up to params.steps tokens, stopping early when the
// model chooses one of `stop_tokens` or the sequence reaches `max_tokens`. With `all_logits`,
// Generation::logits holds every position's logits. Throws std::invalid_argument for an empty
// prompt or one longer than max_tokens (`what` names the model), a negative step count or
// temperature, or a zero seed.
Generation generate(const TransformerWeights& weights, const std::vector<int32_t>& prompt,
                    const GenerateParams& params, const std::vector<int32_t>& stop_tokens, int64_t max_tokens,
                    bool all_logits, const std::string& what);

// Writes the generation's q, k, v and k_pre_rope of every layer to `path` through DumpWriter;
// `info` describes it (tokens, text, model).
void write_generation_dump(const std::string& path, const DumpInfo& info, const Generation& gen,
                           DumpWriteOptions options = {});

// The sampler of run.c: argmax at temperature 0, else softmax(logits / temperature) sampled with
// a xorshift RNG, over the top-p nucleus when 0 < top_p < 1. `logits` is overwritten.
class Sampler {
 public:
  Sampler(float temperature, float top_p, uint64_t seed);
  int32_t sample(std::vector<float>& logits);
  float random_f32();  // in [0, 1), from the next 24 random bits

 private:
  float temperature_, top_p_;
  uint64_t state_;
};

}  // namespace kvlab
