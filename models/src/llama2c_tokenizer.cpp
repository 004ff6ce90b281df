// run.c's BPE tokenizer: the file format, encode() and decode(), kept faithful so that prompts
// become the same token ids as in llama2.c.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <stdexcept>

#include "kvlab/llama2c.h"

namespace kvlab {

Llama2cTokenizer::Llama2cTokenizer(const std::string& path, int32_t vocab_size) : path_(path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::is_regular_file(path, ec)) throw std::runtime_error("'" + path + "': tokenizer file not found");
  if (vocab_size <= 0) throw std::invalid_argument("'" + path + "': vocab_size must be positive");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("'" + path + "': cannot open the tokenizer file");
  auto truncated = [&](const std::string& where) {
    return std::runtime_error("'" + path + "': tokenizer file truncated in " + where +
                              " (the model's vocab_size is " + std::to_string(vocab_size) + ")");
  };
  in.read(reinterpret_cast<char*>(&max_token_length_), sizeof max_token_length_);
  if (!in) throw truncated("the max_token_length header");
  if (max_token_length_ <= 0 || max_token_length_ > (1 << 16))
    throw std::runtime_error("'" + path + "': max_token_length " + std::to_string(max_token_length_) +
                             " is not plausible; not a llama2.c tokenizer file");
  // Each entry takes at least 8 bytes (score, length): a vocabulary the file cannot hold is
  // refused before the tables are allocated.
  const uint64_t size = fs::file_size(path, ec);
  if (ec || size < 4 + 8 * (uint64_t)vocab_size) throw truncated("its " + std::to_string(size) + " bytes");
  pieces_.resize(vocab_size);
  scores_.resize(vocab_size);
  for (int32_t i = 0; i < vocab_size; ++i) {
    const std::string where = "token " + std::to_string(i);
    int32_t len = 0;
    in.read(reinterpret_cast<char*>(&scores_[i]), sizeof(float));
    in.read(reinterpret_cast<char*>(&len), sizeof len);
    if (!in) throw truncated(where);
    if (len < 0 || len > max_token_length_)
      throw std::runtime_error("'" + path + "': " + where + " has length " + std::to_string(len) +
                               ", outside 0.." + std::to_string(max_token_length_));
    pieces_[i].resize(len);
    in.read(pieces_[i].data(), len);
    if (!in) throw truncated(where);
  }
  // run.c reads only vocab_size entries; more bytes mean the tokenizer of a bigger vocabulary.
  if (in.peek() != std::char_traits<char>::eof())
    throw std::runtime_error("'" + path + "': the tokenizer has bytes after its " +
                             std::to_string(vocab_size) +
                             " entries; is it the tokenizer of another model (its vocab_size differs)?");

  sorted_.resize(vocab_size);
  for (int32_t i = 0; i < vocab_size; ++i) sorted_[i] = i;
  std::sort(sorted_.begin(), sorted_.end(),
            [&](int32_t a, int32_t b) { return pieces_[a] != pieces_[b] ? pieces_[a] < pieces_[b] : a < b; });
}

int32_t Llama2cTokenizer::lookup(const std::string& s) const {
  auto it = std::lower_bound(sorted_.begin(), sorted_.end(), s,
                             [&](int32_t id, const std::string& key) { return pieces_[id] < key; });
  return it != sorted_.end() && pieces_[*it] == s ? *it : -1;
}

std::vector<int32_t> Llama2cTokenizer::encode(const std::string& text, bool bos, bool eos) const {
  std::vector<int32_t> ids;
  if (bos) ids.push_back(kBos);
  // SentencePiece's add_dummy_prefix: the text starts as if after a space.
  if (!text.empty())
    if (int32_t space = lookup(" "); space >= 0) ids.push_back(space);

  // One code point at a time (at most 4 bytes); unknown ones fall back to <0xXX> byte tokens,
  // which sit at ids 3..258.
  std::string cp;
  for (size_t i = 0; i < text.size(); ++i) {
    const unsigned char c = text[i];
    if ((c & 0xC0) != 0x80) cp.clear();
    cp.push_back((char)c);
    const bool continues = i + 1 < text.size() && ((unsigned char)text[i + 1] & 0xC0) == 0x80;
    if (continues && cp.size() < 4) continue;
    if (int32_t id = lookup(cp); id >= 0) {
      ids.push_back(id);
    } else {
      for (unsigned char b : cp) {
        if (b + 3 >= size())
          throw std::runtime_error("'" + path_ + "': the vocabulary has no byte token for 0x" +
                                   std::to_string(b));
        ids.push_back(b + 3);
      }
    }
    cp.clear();
  }

  // Merge the adjacent pair whose merged piece scores best (the first such pair on ties),
  // until no pair merges into a known piece.
  for (;;) {
    float best_score = -1e10f;
    int32_t best_id = -1;
    size_t best_at = 0;
    for (size_t i = 0; i + 1 < ids.size(); ++i) {
      const int32_t id = lookup(pieces_[ids[i]] + pieces_[ids[i + 1]]);
      if (id >= 0 && scores_[id] > best_score) {
        best_score = scores_[id];
        best_id = id;
        best_at = i;
      }
    }
    if (best_id < 0) break;
    ids[best_at] = best_id;
    ids.erase(ids.begin() + (ptrdiff_t)best_at + 1);
  }
  if (eos) ids.push_back(kEos);
  return ids;
}

std::string Llama2cTokenizer::decode(int32_t prev_token, int32_t token) const {
  if (token < 0 || token >= size())
    throw std::out_of_range("token id " + std::to_string(token) + " outside the vocabulary [0, " +
                            std::to_string(size()) + ")");
  std::string p = pieces_[token];
  // After BOS, SentencePiece drops the leading space of the first piece.
  if (prev_token == kBos && !p.empty() && p[0] == ' ') p.erase(0, 1);
  // Raw byte tokens "<0xXX>" stand for the byte itself.
  auto hex = [](char ch) -> int {
    if (ch >= '0' && ch <= '9') return ch - '0';
    if (ch >= 'A' && ch <= 'F') return ch - 'A' + 10;
    if (ch >= 'a' && ch <= 'f') return ch - 'a' + 10;
    return -1;
  };
  if (p.size() == 6 && p.compare(0, 3, "<0x") == 0 && p[5] == '>' && hex(p[3]) >= 0 && hex(p[4]) >= 0)
    return std::string(1, (char)(hex(p[3]) * 16 + hex(p[4])));
  return p;
}

namespace {

// Length of the valid UTF-8 sequence starting at s[i], or 0 when it is not one.
size_t utf8_length(const std::string& s, size_t i) {
  const unsigned char c = s[i];
  size_t n;
  uint32_t cp;
  if (c < 0x80) return 1;
  if ((c & 0xE0) == 0xC0) {
    n = 2;
    cp = c & 0x1F;
  } else if ((c & 0xF0) == 0xE0) {
    n = 3;
    cp = c & 0x0F;
  } else if ((c & 0xF8) == 0xF0) {
    n = 4;
    cp = c & 0x07;
  } else {
    return 0;
  }
  if (i + n > s.size()) return 0;
  for (size_t k = 1; k < n; ++k) {
    const unsigned char d = s[i + k];
    if ((d & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (d & 0x3F);
  }
  const uint32_t min_cp[5] = {0, 0, 0x80, 0x800, 0x10000};  // reject overlong forms
  if (cp < min_cp[n] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
  return n;
}

}  // namespace

std::string Llama2cTokenizer::decode_all(const std::vector<int32_t>& tokens) const {
  std::string raw;
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (i == 0 && tokens[i] == kBos) continue;  // run.c never prints the BOS it starts from
    raw += decode(i ? tokens[i - 1] : -1, tokens[i]);
  }
  // The text goes into an HDF5 UTF-8 string: byte tokens may not form valid UTF-8 (a sequence
  // cut short), and run.c's safe_printf skips control bytes too.
  std::string out;
  for (size_t i = 0; i < raw.size();) {
    const size_t n = utf8_length(raw, i);
    if (n == 0) {
      out += "\xEF\xBF\xBD";  // U+FFFD
      ++i;
      continue;
    }
    const unsigned char c = raw[i];
    const bool control = n == 1 && (c < 0x20 || c == 0x7F) && c != '\t' && c != '\n' && c != '\r';
    if (!control) out.append(raw, i, n);
    i += n;
  }
  return out;
}

}  // namespace kvlab
