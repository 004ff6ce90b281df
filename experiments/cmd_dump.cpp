// kvlab dump (--llama2c MODEL.bin --tokenizer TOK.bin | --model HF_DIR)
//            (--prompt TEXT | --prompt-file F | --tokens F) [--logits L.npy] [--out DUMP.h5]
// Generates with the built-in runner (llama2.c checkpoints or Hugging Face Llama-family
// directories) and writes every layer's q/k/v as a KV dump.
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <stdexcept>

#include "cli_options.h"
#include "common.h"
#include "kvlab/hf_model.h"
#include "kvlab/hf_tokenizer.h"
#include "kvlab/llama2c.h"
#include "kvlab/npy.h"
#include "kvlab/path_checks.h"
#include "text_input.h"

namespace kvlab::cli {
namespace {

struct DumpArgs {
  std::string llama2c, hf_dir, tokenizer, prompt, prompt_file, tokens_file, logits, out, model_name;
  GenerateParams gen;
  bool no_compress = false;
};

// POSIX shell quoting, so the recorded command line can be pasted back.
std::string quote(const std::string& s) {
  if (!s.empty() &&
      s.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_./=:+,") ==
          std::string::npos)
    return s;
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

// Every setting that shapes the result, so `source` reproduces the dump.
std::string command_line(const DumpArgs& a, const std::string& out, const std::string& name) {
  char nums[160];
  std::snprintf(nums, sizeof nums, " --steps %d --temperature %g --top-p %g --seed %llu", a.gen.steps,
                (double)a.gen.temperature, (double)a.gen.top_p, (unsigned long long)a.gen.seed);
  std::string s =
      a.hf_dir.empty() ? "kvlab dump --llama2c " + quote(a.llama2c) : "kvlab dump --model " + quote(a.hf_dir);
  if (!a.tokenizer.empty()) s += " --tokenizer " + quote(a.tokenizer);
  if (!a.tokens_file.empty()) {
    s += " --tokens " + quote(a.tokens_file);
  } else {
    s += a.prompt_file.empty() ? " --prompt " + quote(a.prompt) : " --prompt-file " + quote(a.prompt_file);
  }
  return s + nums + " --model-name " + quote(name) + " --out " + quote(out) +
         (a.no_compress ? " --no-compress" : "");
}

// The model name when none is given: the checkpoint's file stem or the directory's name.
std::string default_name(const DumpArgs& a) {
  namespace fs = std::filesystem;
  if (a.hf_dir.empty()) return fs::path(a.llama2c).stem().string();
  const fs::path p = fs::path(a.hf_dir).lexically_normal();
  return (p.has_filename() ? p : p.parent_path()).filename().string();
}

struct Result {
  Generation gen;
  DumpInfo info;
  std::string shape;  // for the summary line
  int64_t vocab = 0;
};

Result run_llama2c(const DumpArgs& a, const std::string& prompt, const std::string& name,
                   const std::string& source) {
  const Llama2cModel model = load_llama2c(a.llama2c);
  const Llama2cConfig& c = model.config;
  Result r;
  if (a.tokens_file.empty()) {
    if (a.tokenizer.empty()) throw std::invalid_argument("--llama2c with a prompt needs --tokenizer TOK.bin");
    r.gen = llama2c_generate(model, Llama2cTokenizer(a.tokenizer, c.vocab_size), prompt, a.gen);
  } else {
    r.gen = generate(llama2c_weights(model), read_token_file(a.tokens_file), a.gen, {Llama2cTokenizer::kBos},
                     c.seq_len, !a.logits.empty(), "'" + a.llama2c + "'");
  }
  r.info = llama2c_dump_info(model, r.gen, name, source);
  r.vocab = c.vocab_size;
  return r;
}

Result run_hf(const DumpArgs& a, const std::string& prompt, const std::string& name,
              const std::string& source) {
  namespace fs = std::filesystem;
  const HfModel model = load_hf_model(a.hf_dir);
  const HfConfig& c = model.config;
  std::optional<HfTokenizer> tok;
  std::vector<int32_t> ids;
  if (a.tokens_file.empty()) {
    tok.emplace(a.tokenizer.empty() ? (fs::path(a.hf_dir) / "tokenizer.json").string() : a.tokenizer);
    if (tok->size() > c.t.vocab_size)
      throw std::invalid_argument("the tokenizer has " + std::to_string(tok->size()) +
                                  " tokens, more than the vocab_size " + std::to_string(c.t.vocab_size) +
                                  " of '" + a.hf_dir + "/config.json'");
    ids = tok->encode(prompt);
  } else {
    ids = read_token_file(a.tokens_file);
  }
  check_hf_sequence(c, std::min<int64_t>((int64_t)ids.size() + a.gen.steps, c.max_position_embeddings));
  Result r;
  r.gen = generate(model.weights, ids, a.gen, c.eos_token_ids, c.max_position_embeddings, !a.logits.empty(),
                   "'" + a.hf_dir + "'");
  if (tok) r.gen.text = tok->decode(r.gen.tokens);
  r.info = hf_dump_info(model, r.gen, name, source);
  r.vocab = c.t.vocab_size;
  return r;
}

void run(const DumpArgs& a) {
  namespace fs = std::filesystem;
  const auto t0 = std::chrono::steady_clock::now();
  // Every file read is checked up front and no output may be one of them (the model directory
  // included: an output inside it is refused).
  std::vector<NamedPath> files;
  if (!a.llama2c.empty()) files.push_back({"--llama2c", a.llama2c});
  if (!a.tokenizer.empty()) files.push_back({"--tokenizer", a.tokenizer});
  if (!a.prompt_file.empty()) files.push_back({"--prompt-file", a.prompt_file});
  if (!a.tokens_file.empty()) files.push_back({"--tokens", a.tokens_file});
  for (const NamedPath& in : files) check_input_file(in);
  std::vector<NamedPath> inputs = files;
  if (!a.hf_dir.empty()) inputs.push_back({"--model", a.hf_dir});
  const std::string prompt = !a.prompt_file.empty() ? read_prompt_file(a.prompt_file) : a.prompt;
  const std::string name = a.model_name.empty() ? default_name(a) : a.model_name;
  const std::string out = a.out.empty() ? name + ".h5" : a.out;
  std::vector<NamedPath> outputs = {{"--out", out}};
  if (!a.logits.empty()) outputs.push_back({"--logits", a.logits});
  check_outputs_not_inputs(outputs, inputs);
  const std::string source = command_line(a, out, name);

  Result r = a.hf_dir.empty() ? run_llama2c(a, prompt, name, source) : run_hf(a, prompt, name, source);
  const Generation& g = r.gen;
  const auto t1 = std::chrono::steady_clock::now();
  write_generation_dump(out, r.info, g, DumpWriteOptions{!a.no_compress});
  if (!a.logits.empty()) write_npy(a.logits, make_npy(g.logits, {(int64_t)g.tokens.size(), r.vocab}));
  const auto t2 = std::chrono::steady_clock::now();

  std::printf("%s\n", g.text.c_str());
  std::fflush(stdout);
  const int generated = (int)g.tokens.size() - g.prompt_tokens;
  const char* why = g.stopped                 ? ", stopped at a stop token"
                    : generated < a.gen.steps ? ", stopped at the model's length"
                                              : "";
  const auto secs = [](auto d) { return std::chrono::duration<double>(d).count(); };
  const DumpInfo& i = r.info;
  std::fprintf(
      stderr,
      "%s: %zu tokens (%d prompt + %d generated%s), %lld layers, %lld q / %lld kv heads, head_dim %lld, "
      "float32, %.2f MB, %.2f s (generate %.2f s, write %.2f s)\n",
      out.c_str(), g.tokens.size(), g.prompt_tokens, generated, why, (long long)i.num_layers,
      (long long)i.num_q_heads, (long long)i.num_kv_heads, (long long)i.head_dim,
      (double)fs::file_size(out) / 1e6, secs(t2 - t0), secs(t1 - t0), secs(t2 - t1));
}

}  // namespace

static void add_dump(CLI::App& app) {
  auto a = std::make_shared<DumpArgs>();
  auto* c = app.add_subcommand(
      "dump",
      "Run a llama2.c or Hugging Face Llama-family model on a prompt and dump every layer's q/k/v (HDF5)");
  auto* l2c = c->add_option("--llama2c", a->llama2c, "llama2.c checkpoint (version-0 .bin, as run.c reads)");
  auto* hf = c->add_option("--model", a->hf_dir,
                           "Hugging Face directory: config.json, model.safetensors (or an index and shards), "
                           "tokenizer.json (Llama, Mistral, Qwen2; docs/FORMATS.md)");
  l2c->excludes(hf);
  c->add_option(
      "--tokenizer", a->tokenizer,
      "llama2.c: its tokenizer (.bin, e.g. tok512.bin); --model: a tokenizer.json other than DIR's");
  auto* p = c->add_option("--prompt", a->prompt, "prompt text (BOS is prepended)");
  auto* pf = c->add_option("--prompt-file", a->prompt_file,
                           "read the prompt from a file (one trailing newline dropped)");
  auto* tf =
      c->add_option("--tokens", a->tokens_file,
                    "token ids to run instead of a prompt, as they are (no BOS added): integers separated by "
                    "spaces or commas; no tokenizer is read");
  p->excludes(pf);
  tf->excludes(p)->excludes(pf);
  c->add_option("--steps", a->gen.steps,
                "tokens to generate after the prompt (stops early at a stop token or the model's length)")
      ->check(int_range(0))
      ->capture_default_str();
  c->add_option("--temperature", a->gen.temperature, "0: greedy (argmax); > 0: sample")
      ->check(real_range(0, std::numeric_limits<float>::max()))
      ->capture_default_str();
  c->add_option("--top-p", a->gen.top_p, "nucleus sampling when in (0, 1); 1: off")
      ->check(real_range(0, 1, true))
      ->capture_default_str();
  c->add_option("--seed", a->gen.seed, "sampling seed (nonzero)")->check(int_range(1))->capture_default_str();
  add_out_option(c, a->out, "output dump (default: <model name>.h5)");
  c->add_option("--logits", a->logits, "also write every position's logits (float32 .npy, tokens x vocab)");
  c->add_option("--model-name", a->model_name,
                "the dump's model attribute (default: the checkpoint's file stem or the directory's name)");
  c->add_flag("--no-compress", a->no_compress,
              "store the HDF5 chunks uncompressed (default: shuffle + deflate)");
  c->callback([a, p, pf, tf, l2c, hf] {
    if (l2c->count() == 0 && hf->count() == 0)
      throw std::invalid_argument("give --llama2c MODEL.bin or --model DIR");
    if (p->count() == 0 && pf->count() == 0 && tf->count() == 0)
      throw std::invalid_argument("give --prompt TEXT, --prompt-file FILE or --tokens FILE");
    run(*a);
  });
}

KVLAB_COMMAND(20, add_dump);

}  // namespace kvlab::cli
