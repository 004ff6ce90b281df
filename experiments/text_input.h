// Text and token ids read from files for the commands that run a model (dump, tokenize).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace kvlab::cli {

// The file's bytes, one trailing newline (editors add it) dropped.
std::string read_prompt_file(const std::string& path);
// Token ids as text: integers >= 0 separated by white space or commas (what `kvlab tokenize`
// writes). Throws std::runtime_error naming the file and the first bad entry.
std::vector<int32_t> read_token_file(const std::string& path);

}  // namespace kvlab::cli
