// What a KV method does to the model (kvlab ppl): teacher-forced perplexity, KL of the
// next-token distribution against the fp16 cache, top-1 agreement and greedy divergence, with
// the method simulated decode-faithfully in the decoder (transformer.h, CacheSimulation).
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "kvlab/method.h"
#include "kvlab/transformer.h"

namespace kvlab {

struct PplOptions {
  std::vector<std::string> methods;  // specs or presets; the fp16 cache is the reference
  std::vector<bool> layers;          // layers whose cache is quantized; empty: all
  // Sensitivity runs: only these key channels are quantized (the others and every value stay
  // fp16); empty: all channels of both roles.
  std::vector<int64_t> key_channels;
  int64_t window = 2048;  // tokens per window (consecutive, from the first token)
  int64_t windows = 1;
  int64_t prompt_tokens = 512;                       // greedy: prompt = the window's first tokens
  int64_t generate_tokens = 64;                      // greedy: tokens generated after it
  std::function<void(const std::string&)> progress;  // one line per finished run
};

struct PplStats {
  double ppl = 0, kl_mean = 0, kl_max = 0, top1_agreement = 0;
  double greedy_divergence = 0;  // first generated position that differs; generate_tokens if none
  double nll_sum = 0;            // sum of -log p(next) over the predicted tokens
  int64_t predicted = 0;         // window - 1 per window
};

struct PplMethodResult {
  std::string name, spec;
  double bits_per_element = 0;
  std::string calibration;  // what the method learned from (Method::calibration); empty: nothing
  PplStats all;             // pooled over windows (greedy: mean over windows)
  std::vector<PplStats> per_window;
  double delta_ppl = 0;  // all.ppl - the reference's
};

struct PplResult {
  int64_t window = 0, windows = 0, prompt_tokens = 0, generate_tokens = 0;
  std::vector<int64_t> quantized_layers;
  PplStats reference;  // the fp16 cache
  std::vector<PplStats> reference_windows;
  std::vector<PplMethodResult> methods;
};

// Throws std::invalid_argument naming the option for: fewer than 2 tokens, a window longer than
// `context` or the tokens, windows that do not fit the tokens, a method without a decode rule, for
// another model (check_model), whose group exceeds the window or that quantizes nothing in it,
// a prompt + generation longer than the window, a key channel outside the head.
void check_ppl(const TransformerConfig& c, int64_t context, int64_t tokens, const PplOptions& o);
PplResult evaluate_ppl(const TransformerWeights& w, int64_t context, const std::vector<int32_t>& tokens,
                       const PplOptions& o);

}  // namespace kvlab
