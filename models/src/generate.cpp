// Generation: the prompt as one block, then one token at a time; every position's q/k/v kept.
#include "kvlab/generate.h"

#include <algorithm>
#include <stdexcept>

namespace kvlab {

Generation generate(const TransformerWeights& weights, const std::vector<int32_t>& prompt,
                    const GenerateParams& params, const std::vector<int32_t>& stop_tokens, int64_t max_tokens,
                    bool all_logits, const std::string& what) {
  if (params.steps < 0)
    throw std::invalid_argument("steps must be >= 0, got " + std::to_string(params.steps));
  Sampler sampler(params.temperature, params.top_p, params.seed);
  if (prompt.empty()) throw std::invalid_argument("the prompt has no tokens");
  if ((int64_t)prompt.size() > max_tokens)
    throw std::invalid_argument("the prompt is " + std::to_string(prompt.size()) +
                                " tokens, longer than the model's " + std::to_string(max_tokens) + " (" +
                                what + ")");

  Generation gen;
  gen.tokens = prompt;
  gen.prompt_tokens = (int32_t)prompt.size();
  const int64_t vocab = weights.config.vocab_size;
  // Room for the whole sequence; the last generated token is forwarded too, so the dump holds
  // the KV of exactly gen.tokens.
  TransformerRunner runner(weights, std::min<int64_t>(max_tokens, (int64_t)prompt.size() + params.steps));
  std::vector<float> logits;
  const int64_t n0 = (int64_t)prompt.size();
  runner.forward(prompt.data(), n0, all_logits ? n0 : 1, logits);
  if (all_logits) gen.logits = logits;
  for (int32_t step = 0; step < params.steps && (int64_t)gen.tokens.size() < max_tokens; ++step) {
    std::vector<float> last(logits.end() - vocab, logits.end());
    const int32_t next = sampler.sample(last);
    if (std::find(stop_tokens.begin(), stop_tokens.end(), next) != stop_tokens.end()) {
      gen.stopped = true;
      break;
    }
    gen.tokens.push_back(next);
    runner.forward(&gen.tokens.back(), 1, 1, logits);
    if (all_logits) gen.logits.insert(gen.logits.end(), logits.begin(), logits.end());
  }
  for (int64_t l = 0; l < weights.config.n_layers; ++l) gen.kv.push_back(runner.captured(l));
  return gen;
}

}  // namespace kvlab
