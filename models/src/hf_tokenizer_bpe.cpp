// encode and decode of the contract's tokenizer, step for step as the tokenizers library
// (0.2x) does them: added tokens split out first, Metaspace words, rank-ordered BPE merges per
// word with byte fallback; the decoder chain on the way back.
#include <algorithm>
#include <queue>
#include <stdexcept>

#include "kvlab/hf_tokenizer.h"

namespace kvlab {
namespace {

const std::string kSpace = "\xE2\x96\x81";  // "▁"

size_t utf8_length(unsigned char c) {
  return c < 0x80 ? 1 : c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
}

// Rust's String::from_utf8 accepts exactly this: no overlong forms, surrogates or values past
// U+10FFFF.
bool valid_utf8(const std::string& s) {
  for (size_t i = 0; i < s.size();) {
    const unsigned char c = s[i];
    if (c < 0x80) {
      ++i;
      continue;
    }
    // continuation bytes, the lead byte's payload and the smallest code point of that length
    const size_t n = (c & 0xE0) == 0xC0 ? 1 : (c & 0xF0) == 0xE0 ? 2 : (c & 0xF8) == 0xF0 ? 3 : 0;
    if (n == 0) return false;
    uint32_t cp = c & (0x7F >> (n + 1));
    const uint32_t min = n == 1 ? 0x80 : n == 2 ? 0x800 : 0x10000;
    for (size_t k = 1; k <= n; ++k) {
      if (i + k >= s.size() || ((unsigned char)s[i + k] & 0xC0) != 0x80) return false;
      cp = (cp << 6) | ((unsigned char)s[i + k] & 0x3F);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
    i += n + 1;
  }
  return true;
}

// ByteFallback's test for a byte piece: "<0x" two characters ">" that Rust's
// u8::from_str_radix(_, 16) takes (hex digits, or '+' and one digit).
int byte_piece(const std::string& t) {
  if (t.size() != 6 || t.compare(0, 3, "<0x") != 0 || t[5] != '>') return -1;
  auto hex = [](char c) {
    return c >= '0' && c <= '9'   ? c - '0'
           : c >= 'a' && c <= 'f' ? c - 'a' + 10
           : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                  : -1;
  };
  const int hi = hex(t[3]), lo = hex(t[4]);
  if (t[3] == '+' && lo >= 0) return lo;
  return hi >= 0 && lo >= 0 ? hi * 16 + lo : -1;
}

void replace_all(std::string& s, const std::string& from, const std::string& to) {
  for (size_t p = s.find(from); p != std::string::npos; p = s.find(from, p + to.size()))
    s.replace(p, from.size(), to);
}

}  // namespace

void HfTokenizer::bpe_word(const std::string& word, std::vector<int32_t>& out) const {
  struct Sym {
    int32_t id;
    int prev, next;
    bool alive;
  };
  std::vector<Sym> s;
  for (size_t i = 0; i < word.size();) {
    const size_t n = std::min(utf8_length((unsigned char)word[i]), word.size() - i);
    const auto it = ids_.find(word.substr(i, n));
    if (it != ids_.end()) {
      s.push_back({it->second, 0, 0, true});
    } else {  // byte fallback: ids 3..258 are <0x00>..<0xFF> (checked at load)
      for (size_t k = 0; k < n; ++k) s.push_back({3 + (int32_t)(unsigned char)word[i + k], 0, 0, true});
    }
    i += n;
  }
  for (int i = 0; i < (int)s.size(); ++i) {
    s[i].prev = i - 1;
    s[i].next = i + 1 < (int)s.size() ? i + 1 : -1;
  }
  struct Merge {
    int32_t rank, pos, id;
    bool operator<(const Merge& o) const {
      return rank != o.rank ? rank > o.rank : pos > o.pos;
    }  // lowest first
  };
  std::priority_queue<Merge> queue;
  auto push = [&](int pos) {
    if (pos < 0 || s[pos].next < 0) return;
    const auto it = merges_.find({s[pos].id, s[s[pos].next].id});
    if (it != merges_.end()) queue.push({it->second.first, pos, it->second.second});
  };
  for (int i = 0; i + 1 < (int)s.size(); ++i) push(i);
  while (!queue.empty()) {
    const Merge top = queue.top();
    queue.pop();
    Sym& a = s[top.pos];
    if (!a.alive || a.next < 0) continue;
    const auto it = merges_.find({a.id, s[a.next].id});
    if (it == merges_.end() || it->second.second != top.id) continue;  // an expired entry
    Sym& b = s[a.next];
    a.id = top.id;
    b.alive = false;
    a.next = b.next;
    if (b.next >= 0) s[b.next].prev = top.pos;
    push(a.prev);
    push(top.pos);
  }
  for (const Sym& x : s)
    if (x.alive) out.push_back(x.id);
}

std::vector<int32_t> HfTokenizer::encode(const std::string& text, bool bos) const {
  std::vector<int32_t> out;
  if (bos) out.push_back(kBos);
  // Metaspace on one stretch of text between added tokens; "first": ▁ is prepended only to the
  // stretch at offset 0. Each ▁ starts a word.
  auto words = [&](size_t begin, size_t end) {
    if (begin == end) return;
    std::string t = text.substr(begin, end - begin);
    replace_all(t, " ", kSpace);
    if (begin == 0 && t.compare(0, kSpace.size(), kSpace) != 0) t = kSpace + t;
    size_t start = 0;
    for (size_t p = t.find(kSpace, 1); p != std::string::npos; p = t.find(kSpace, p + 1)) {
      if (p > start) bpe_word(t.substr(start, p - start), out);
      start = p;
    }
    bpe_word(t.substr(start), out);
  };
  bool starts[256] = {};
  for (const auto& a : added_) starts[(unsigned char)a.first[0]] = true;
  size_t done = 0;
  for (size_t i = 0; i < text.size();) {
    int32_t best = -1;
    size_t len = 0;
    if (starts[(unsigned char)text[i]])
      for (const auto& [content, id] : added_)  // leftmost, then longest
        if (content.size() > len && text.compare(i, content.size(), content) == 0) {
          best = id;
          len = content.size();
        }
    if (best < 0) {
      ++i;
      continue;
    }
    words(done, i);
    out.push_back(best);
    i += len;
    done = i;
  }
  words(done, text.size());
  return out;
}

std::string HfTokenizer::decode(const std::vector<int32_t>& ids, bool skip_special) const {
  std::vector<std::string> tokens;
  for (int32_t id : ids) {
    if (id < 0 || id >= size())
      throw std::out_of_range("'" + path_ + "': token id " + std::to_string(id) + " outside [0, " +
                              std::to_string(size()) + ")");
    if (!(skip_special && special_[id])) tokens.push_back(pieces_[id]);
  }
  std::string out;
  if (!llama_decoder_) {  // Metaspace: ▁ -> ' ', and none kept in the first token
    for (size_t i = 0; i < tokens.size(); ++i) {
      replace_all(tokens[i], kSpace, i == 0 ? "" : " ");
      out += tokens[i];
    }
    return out;
  }
  // Replace, ByteFallback (a run of byte pieces becomes its text, or U+FFFD per byte when it is
  // not UTF-8), Fuse, Strip one leading space.
  std::string bytes;
  size_t run = 0;
  auto flush = [&] {
    if (run == 0) return;
    if (valid_utf8(bytes)) {
      out += bytes;
    } else {
      for (size_t k = 0; k < run; ++k) out += "\xEF\xBF\xBD";
    }
    bytes.clear();
    run = 0;
  };
  for (std::string& t : tokens) {
    replace_all(t, kSpace, " ");
    const int b = byte_piece(t);
    if (b >= 0) {
      bytes += (char)b;
      ++run;
    } else {
      flush();
      out += t;
    }
  }
  flush();
  if (!out.empty() && out[0] == ' ') out.erase(0, 1);
  return out;
}

}  // namespace kvlab
