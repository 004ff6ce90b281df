// kvlab tokenize (--model DIR | --tokenizer tokenizer.json) (--prompt T | --prompt-file F) [--out IDS]
// kvlab tokenize ... --tokens IDS [--out TEXT]
// Text to token ids (what `kvlab dump --tokens` reads), or ids back to text, with the reference
// tokenizer.json format (docs/FORMATS.md).
#include <cstdio>
#include <filesystem>
#include <stdexcept>
#include <vector>

#include "cli_options.h"
#include "cmd_eval_output.h"
#include "common.h"
#include "kvlab/hf_tokenizer.h"
#include "kvlab/path_checks.h"
#include "text_input.h"

namespace kvlab::cli {
namespace {

struct TokenizeArgs {
  std::string model, tokenizer, prompt, prompt_file, tokens_file, out;
  bool no_bos = false;
};

// Standard output, or a file written through a temporary name.
void write_text(const std::string& path, const std::string& s) {
  if (path.empty()) {
    std::fwrite(s.data(), 1, s.size(), stdout);
  } else {
    write_file_atomically(path, s);
  }
}

void run(const TokenizeArgs& a) {
  const std::string path =
      !a.tokenizer.empty() ? a.tokenizer : (std::filesystem::path(a.model) / "tokenizer.json").string();
  std::vector<NamedPath> inputs = {{a.tokenizer.empty() ? "--model" : "--tokenizer", path}};
  if (!a.prompt_file.empty()) inputs.push_back({"--prompt-file", a.prompt_file});
  if (!a.tokens_file.empty()) inputs.push_back({"--tokens", a.tokens_file});
  for (const NamedPath& in : inputs) check_input_file(in);
  if (!a.out.empty()) check_outputs_not_inputs({{"--out", a.out}}, inputs);
  const HfTokenizer tok(path);
  if (!a.tokens_file.empty()) {
    write_text(a.out, tok.decode(read_token_file(a.tokens_file)));
    return;
  }
  const std::string text = !a.prompt_file.empty() ? read_prompt_file(a.prompt_file) : a.prompt;
  std::string s;
  for (int32_t id : tok.encode(text, !a.no_bos)) s += (s.empty() ? "" : " ") + std::to_string(id);
  write_text(a.out, s + "\n");
}

}  // namespace

static void add_tokenize(CLI::App& app) {
  auto a = std::make_shared<TokenizeArgs>();
  auto* c = app.add_subcommand("tokenize", "Text to token ids or back, with a model's tokenizer.json");
  auto* m = c->add_option("--model", a->model, "Hugging Face directory holding tokenizer.json");
  auto* t = c->add_option("--tokenizer", a->tokenizer, "a tokenizer.json file");
  m->excludes(t);
  auto* p = c->add_option("--prompt", a->prompt, "text to encode");
  auto* pf =
      c->add_option("--prompt-file", a->prompt_file, "encode a file's text (one trailing newline dropped)");
  auto* tf =
      c->add_option("--tokens", a->tokens_file, "decode these ids (integers separated by spaces or commas)");
  p->excludes(pf);
  tf->excludes(p)->excludes(pf);
  c->add_flag("--no-bos", a->no_bos, "do not prepend <s>");
  add_out_option(c, a->out, "output file (default: standard output)");
  c->callback([a, m, t, p, pf, tf] {
    if (m->count() == 0 && t->count() == 0)
      throw std::invalid_argument("give --model DIR or --tokenizer FILE");
    if (p->count() == 0 && pf->count() == 0 && tf->count() == 0)
      throw std::invalid_argument("give --prompt TEXT, --prompt-file FILE or --tokens FILE");
    run(*a);
  });
}

KVLAB_COMMAND(21, add_tokenize);

}  // namespace kvlab::cli
