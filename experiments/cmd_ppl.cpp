// kvlab ppl (--model DIR | --llama2c BIN --tokenizer TOK) (--text-file F | --tokens F)
//           [--methods LIST] [--quant-layers L] [--window N] [--windows N] [--prompt-tokens N]
//           [--generate N] [--format table|csv|json] [--out F] [--quiet] [--threads N]
// What KV methods do to the model: teacher-forced perplexity, KL against the fp16 cache, top-1
// agreement and greedy divergence, each method simulated decode-faithfully (kvlab/ppl.h).
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <sstream>
#include <stdexcept>

#include "cli_options.h"
#include "cmd_eval_output.h"
#include "common.h"
#include "kvlab/hf_model.h"
#include "kvlab/hf_tokenizer.h"
#include "kvlab/kv_text.h"
#include "kvlab/llama2c.h"
#include "kvlab/path_checks.h"
#include "kvlab/ppl.h"
#include "kvlab/ppl_report.h"
#include "kvlab/selection.h"
#include "kvlab/threads.h"
#include "text_input.h"

namespace kvlab::cli {
namespace {

// The decodable counterparts of the first seven presets: int8's whole-sequence scale cannot
// stream, so int8 runs with groups of 128 tokens (docs/FORMATS.md section 10).
const char* kDefaultMethods = "int8:group=128,kivi-4,kivi-2,kivi-2-sink,kitty,kitty-pro";

struct PplArgs {
  std::string llama2c, hf_dir, tokenizer, text_file, tokens_file, methods = kDefaultMethods, quant_layers,
      format = "table", out;
  int64_t window = 0, windows = 1, prompt_tokens = 64, generate = 64;
  int threads = 0;
  bool quiet = false;
};

// "0,3", "2-4" or "0,2-3": the layers whose cache is quantized.
std::vector<bool> parse_layer_list(const std::string& text, int64_t n_layers) {
  std::vector<bool> on(n_layers, false);
  if (text.empty() || text.back() == ',') throw std::invalid_argument("--quant-layers '" + text + "': empty item");
  std::stringstream list(text);
  for (std::string item; std::getline(list, item, ',');) {
    const size_t dash = item.find('-', 1);
    const int64_t a = text::parse_int(item.substr(0, dash), "--quant-layers"),
                  b = dash == std::string::npos ? a : text::parse_int(item.substr(dash + 1), "--quant-layers");
    if (a < 0 || b < a || b >= n_layers)
      throw std::invalid_argument("--quant-layers '" + item + "': layers run 0-" + std::to_string(n_layers - 1));
    for (int64_t l = a; l <= b; ++l) on[l] = true;
  }
  return on;
}

void run(const PplArgs& a) {
  namespace fs = std::filesystem;
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<NamedPath> files;
  if (!a.llama2c.empty()) files.push_back({"--llama2c", a.llama2c});
  if (!a.tokenizer.empty()) files.push_back({"--tokenizer", a.tokenizer});
  if (!a.text_file.empty()) files.push_back({"--text-file", a.text_file});
  if (!a.tokens_file.empty()) files.push_back({"--tokens", a.tokens_file});
  for (const NamedPath& in : files) check_input_file(in);
  PplOptions o;
  o.methods = split_method_list(a.methods);
  std::vector<NamedPath> inputs = files;
  if (!a.hf_dir.empty()) inputs.push_back({"--model", a.hf_dir});
  for (const std::string& m : o.methods)
    for (const std::string& f : parse_method(m)->files()) inputs.push_back({"--methods", f});
  if (!a.out.empty()) check_outputs_not_inputs({{"--out", a.out}}, inputs);

  // the model, its context and the text's tokens
  HfModel hf;
  Llama2cModel l2c;
  TransformerWeights weights;
  int64_t context = 0;
  std::vector<int32_t> tokens;
  const std::string text = a.text_file.empty() ? "" : read_prompt_file(a.text_file);
  if (!a.hf_dir.empty()) {
    hf = load_hf_model(a.hf_dir);
    weights = hf.weights;
    context = hf.config.max_position_embeddings;
    if (a.tokens_file.empty())
      tokens = HfTokenizer(a.tokenizer.empty() ? (fs::path(a.hf_dir) / "tokenizer.json").string() : a.tokenizer)
                   .encode(text);
  } else {
    l2c = load_llama2c(a.llama2c);
    weights = llama2c_weights(l2c);
    context = l2c.config.seq_len;
    if (a.tokens_file.empty()) {
      if (a.tokenizer.empty()) throw std::invalid_argument("--llama2c with --text-file needs --tokenizer TOK.bin");
      tokens = Llama2cTokenizer(a.tokenizer, l2c.config.vocab_size).encode(text, true);
    }
  }
  if (!a.tokens_file.empty()) tokens = read_token_file(a.tokens_file);
  const std::string source = a.tokens_file.empty() ? a.text_file : a.tokens_file;
  // a text with only BOS (or nothing) has nothing to predict
  if (tokens.size() < 2 || (a.tokens_file.empty() && text.empty()))
    throw std::invalid_argument((a.tokens_file.empty() ? "--text-file '" : "--tokens '") + source +
                                "' is empty: perplexity needs at least 2 tokens");
  o.window = a.window ? a.window : std::min<int64_t>({2048, context, (int64_t)tokens.size()});
  o.windows = a.windows;
  o.prompt_tokens = std::min<int64_t>(a.prompt_tokens, o.window / 2);
  o.generate_tokens = std::min<int64_t>(a.generate, o.window - o.prompt_tokens);
  if (!a.quant_layers.empty()) o.layers = parse_layer_list(a.quant_layers, weights.config.n_layers);
  check_ppl(weights.config, context, (int64_t)tokens.size(), o);
  if (!a.hf_dir.empty()) check_hf_sequence(hf.config, o.window);
  if (!a.quiet) {
    std::fprintf(stderr, "ppl: %zu tokens, %lld window(s) of %lld, %zu method(s) + fp16\n", tokens.size(),
                 (long long)o.windows, (long long)o.window, o.methods.size());
    o.progress = [t0](const std::string& line) {
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      std::fprintf(stderr, "ppl: %s  (%.1f s)\n", line.c_str(), s);
    };
  }
  ScopedThreads threads(a.threads);
  const PplResult r = evaluate_ppl(weights, context, tokens, o);
  const PplSource src{a.hf_dir.empty() ? a.llama2c : a.hf_dir, source,
                      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count()};
  std::string out;
  if (a.format == "table") {
    out = ppl_table(r, src);
  } else {
    std::ostringstream os;
    if (a.format == "json")
      write_ppl_json(os, r, src);
    else
      write_ppl_csv(os, r);
    out = os.str();
  }
  if (a.out.empty())
    std::fwrite(out.data(), 1, out.size(), stdout);
  else
    write_file_atomically(a.out, out);
}

}  // namespace

static void add_ppl(CLI::App& app) {
  auto a = std::make_shared<PplArgs>();
  auto* c = app.add_subcommand("ppl",
                               "What KV methods do to a model: perplexity, KL against the fp16 cache, top-1 "
                               "agreement, greedy divergence (decode-faithful simulation)");
  auto* l2c = c->add_option("--llama2c", a->llama2c, "llama2.c checkpoint (.bin)");
  auto* hf = c->add_option("--model", a->hf_dir, "Hugging Face directory (config.json, model.safetensors)");
  l2c->excludes(hf);
  c->add_option("--tokenizer", a->tokenizer, "llama2.c: its tokenizer (.bin); --model: another tokenizer.json");
  auto* tf = c->add_option("--text-file", a->text_file, "text to evaluate (BOS prepended)");
  auto* ids = c->add_option("--tokens", a->tokens_file, "token ids instead of a text (as kvlab tokenize writes)");
  tf->excludes(ids);
  c->add_option("--methods", a->methods, "methods, comma-separated presets or specs; fp16 is the reference")
      ->capture_default_str();
  c->add_option("--quant-layers", a->quant_layers, "quantize only these layers' caches: 0,3 or 2-4 (default all)");
  c->add_option("--window", a->window,
                "tokens per window (default: min(2048, the model's context, the text))")
      ->check(int_range(2));
  c->add_option("--windows", a->windows, "consecutive windows from the text's start, results pooled")
      ->check(int_range(1))
      ->capture_default_str();
  c->add_option("--prompt-tokens", a->prompt_tokens, "greedy test: prompt = the window's first N tokens")
      ->check(int_range(1))
      ->capture_default_str();
  c->add_option("--generate", a->generate, "greedy test: tokens generated after the prompt")
      ->check(int_range(1))
      ->capture_default_str();
  add_format_option(c, a->format, "table, csv or json (docs/FORMATS.md section 10.3)", {"table", "csv", "json"});
  add_out_option(c, a->out, "write to FILE instead of stdout (atomically)");
  add_threads_option(c, a->threads);
  add_quiet_flag(c, a->quiet);
  c->callback([a, l2c, hf, tf, ids] {
    if (l2c->count() == 0 && hf->count() == 0) throw std::invalid_argument("give --model DIR or --llama2c MODEL.bin");
    if (tf->count() == 0 && ids->count() == 0) throw std::invalid_argument("give --text-file F or --tokens F");
    run(*a);
  });
}

KVLAB_COMMAND(41, add_ppl);

}  // namespace kvlab::cli
