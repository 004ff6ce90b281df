// kvlab dump --llama2c MODEL.bin --tokenizer TOK.bin (--prompt TEXT | --prompt-file F) [--out DUMP.h5]
// Generates with the built-in llama2.c runner and writes every layer's q/k/v as a KV dump.
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include "cli_options.h"
#include "common.h"
#include "kvlab/llama2c.h"
#include "kvlab/path_checks.h"

namespace kvlab::cli {
namespace {

struct DumpArgs {
  std::string model, tokenizer, prompt, prompt_file, out, model_name;
  Llama2cGenerateParams gen;
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

std::string read_prompt_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("'" + path + "': cannot read the prompt file");
  std::stringstream ss;
  ss << in.rdbuf();
  std::string s = ss.str();
  // Editors end files with a newline that is not part of the prompt.
  if (!s.empty() && s.back() == '\n') s.pop_back();
  if (!s.empty() && s.back() == '\r') s.pop_back();
  return s;
}

// Every setting that shapes the result, so `source` reproduces the dump.
std::string command_line(const DumpArgs& a, const std::string& out, const std::string& name) {
  char nums[160];
  std::snprintf(nums, sizeof nums, " --steps %d --temperature %g --top-p %g --seed %llu", a.gen.steps,
                (double)a.gen.temperature, (double)a.gen.top_p, (unsigned long long)a.gen.seed);
  std::string s = "kvlab dump --llama2c " + quote(a.model) + " --tokenizer " + quote(a.tokenizer);
  s += a.prompt_file.empty() ? " --prompt " + quote(a.prompt) : " --prompt-file " + quote(a.prompt_file);
  return s + nums + " --model-name " + quote(name) + " --out " + quote(out) +
         (a.no_compress ? " --no-compress" : "");
}

void run(const DumpArgs& a) {
  namespace fs = std::filesystem;
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<NamedPath> inputs = {{"--llama2c", a.model}, {"--tokenizer", a.tokenizer}};
  if (!a.prompt_file.empty()) inputs.push_back({"--prompt-file", a.prompt_file});
  for (const NamedPath& in : inputs) check_input_file(in);
  const std::string prompt = a.prompt_file.empty() ? a.prompt : read_prompt_file(a.prompt_file);
  const std::string name = a.model_name.empty() ? fs::path(a.model).stem().string() : a.model_name;
  const std::string out = a.out.empty() ? name + ".h5" : a.out;
  check_outputs_not_inputs({{"--out", out}}, inputs);

  const Llama2cModel model = load_llama2c(a.model);
  const Llama2cTokenizer tok(a.tokenizer, model.config.vocab_size);
  const Llama2cGeneration g = llama2c_generate(model, tok, prompt, a.gen);
  const auto t1 = std::chrono::steady_clock::now();
  write_llama2c_dump(out, model, g, name, command_line(a, out, name), DumpWriteOptions{!a.no_compress});
  const auto t2 = std::chrono::steady_clock::now();

  std::printf("%s\n", g.text.c_str());
  std::fflush(stdout);
  const int generated = (int)g.tokens.size() - g.prompt_tokens;
  const char* why = g.stopped_on_bos ? ", stopped at BOS"
                    : (int)g.tokens.size() == model.config.seq_len && generated < a.gen.steps
                        ? ", stopped at seq_len"
                        : "";
  const auto secs = [](auto d) { return std::chrono::duration<double>(d).count(); };
  std::fprintf(
      stderr,
      "%s: %zu tokens (%d prompt + %d generated%s), %d layers, %d q / %d kv heads, head_dim %d, float32, "
      "%.2f MB, %.2f s (generate %.2f s, write %.2f s)\n",
      out.c_str(), g.tokens.size(), g.prompt_tokens, generated, why, model.config.n_layers,
      model.config.n_heads, model.config.n_kv_heads, model.config.head_dim(),
      (double)fs::file_size(out) / 1e6, secs(t2 - t0), secs(t1 - t0), secs(t2 - t1));
}

}  // namespace

static void add_dump(CLI::App& app) {
  auto a = std::make_shared<DumpArgs>();
  auto* c =
      app.add_subcommand("dump", "Run a llama2.c checkpoint on a prompt and dump every layer's q/k/v (HDF5)");
  c->add_option("--llama2c", a->model, "llama2.c checkpoint (version-0 .bin, as run.c reads)")->required();
  c->add_option("--tokenizer", a->tokenizer, "its tokenizer (.bin, e.g. tok512.bin)")->required();
  auto* p = c->add_option("--prompt", a->prompt, "prompt text (BOS is prepended)");
  auto* pf = c->add_option("--prompt-file", a->prompt_file,
                           "read the prompt from a file (one trailing newline dropped)");
  p->excludes(pf);
  c->add_option("--steps", a->gen.steps,
                "tokens to generate after the prompt (stops early at BOS or seq_len)")
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
  c->add_option("--model-name", a->model_name,
                "the dump's model attribute (default: the checkpoint's file stem)");
  c->add_flag("--no-compress", a->no_compress,
              "store the HDF5 chunks uncompressed (default: shuffle + deflate)");
  c->callback([a, p, pf] {
    if (p->count() == 0 && pf->count() == 0)
      throw std::invalid_argument("give --prompt TEXT or --prompt-file FILE");
    run(*a);
  });
}

KVLAB_COMMAND(20, add_dump);

}  // namespace kvlab::cli
