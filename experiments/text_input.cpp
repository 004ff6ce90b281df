// Reading prompts and token id lists from files.
#include "text_input.h"

#include <climits>
#include <fstream>
#include <sstream>
#include <stdexcept>

namespace kvlab::cli {

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

std::vector<int32_t> read_token_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("'" + path + "': cannot read the token file");
  std::stringstream ss;
  ss << in.rdbuf();
  std::string s = ss.str();
  for (char& c : s)
    if (c == ',') c = ' ';
  std::istringstream words(s);
  std::vector<int32_t> ids;
  for (std::string w; words >> w;) {
    size_t used = 0;
    long long v = -1;
    try {
      v = std::stoll(w, &used);
    } catch (const std::exception&) {}
    if (used != w.size() || v < 0 || v > INT32_MAX)
      throw std::runtime_error("'" + path + "': token " + std::to_string(ids.size()) + " = '" + w +
                               "' is not a token id (integers >= 0, separated by spaces or commas)");
    ids.push_back((int32_t)v);
  }
  if (ids.empty()) throw std::runtime_error("'" + path + "': no token ids");
  return ids;
}

}  // namespace kvlab::cli
