// The tokenizer.json of kvlab's reference model (the format contract, docs/FORMATS.md
// "tokenizer.json"): a BPE model with byte_fallback (vocabulary, merges ranked in file order),
// ids 0 <unk>, 1 <s>, 2 </s>, 3..258 <0x00>..<0xFF>; no normalizer; a Metaspace pre-tokenizer
// ("▁", prepend_scheme first, split); a template that prepends <s>; the Llama decoder sequence
// (Replace "▁" -> " ", ByteFallback, Fuse, Strip) or a Metaspace decoder. encode and decode
// give what the tokenizers library gives; any other tokenizer.json is refused.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <unordered_map>
#include <vector>

namespace kvlab {

class HfTokenizer {
 public:
  static constexpr int32_t kBos = 1;
  // Throws std::runtime_error naming the file and the field that is outside the contract.
  explicit HfTokenizer(const std::string& path);

  // The ids of `text` (UTF-8), <s> first when `bos`: added tokens found in the text (leftmost,
  // longest) stay whole, the rest is split by Metaspace and each word merged by rank, with
  // bytes as <0xXX> where a character is not in the vocabulary.
  std::vector<int32_t> encode(const std::string& text, bool bos = true) const;
  // The text of `ids` through the decoder; special tokens dropped when `skip_special`.
  // Throws std::out_of_range for an id outside the vocabulary.
  std::string decode(const std::vector<int32_t>& ids, bool skip_special = false) const;
  int32_t size() const { return (int32_t)pieces_.size(); }

 private:
  void bpe_word(const std::string& word, std::vector<int32_t>& out) const;
  std::string path_;
  std::vector<std::string> pieces_;  // id -> token text
  std::unordered_map<std::string, int32_t> ids_;
  std::map<std::pair<int32_t, int32_t>, std::pair<int32_t, int32_t>> merges_;  // pair -> (rank, merged id)
  std::vector<std::pair<std::string, int32_t>> added_;                         // matched whole in the text
  std::vector<bool> special_;                                                  // per id
  bool llama_decoder_ = true;                                                  // else the Metaspace decoder
};

}  // namespace kvlab
