// Loading tokenizer.json and checking it against the format contract, field by field, so a
// tokenizer of another kind is refused by name instead of encoding differently.
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "kvlab/hf_tokenizer.h"

namespace kvlab {
namespace {

using nlohmann::json;

const char* const kSpace = "\xE2\x96\x81";  // "▁", Metaspace's replacement

json metaspace(const char* type) {
  return {{"type", type}, {"replacement", kSpace}, {"prepend_scheme", "first"}, {"split", true}};
}

json llama_decoder() {
  return {{"type", "Sequence"},
          {"decoders",
           {{{"type", "Replace"}, {"pattern", {{"String", kSpace}}}, {"content", " "}},
            {{"type", "ByteFallback"}},
            {{"type", "Fuse"}},
            {{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}}}}};
}

}  // namespace

HfTokenizer::HfTokenizer(const std::string& path) : path_(path) {
  auto fail = [&](const std::string& field, const std::string& what) {
    throw std::runtime_error("'" + path + "': " + field + " " + what +
                             " (kvlab reads the tokenizer.json of its reference model only: docs/FORMATS.md; "
                             "give token ids with --tokens to run any model)");
  };
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("'" + path + "': cannot read the tokenizer file");
  json j;
  try {
    j = json::parse(in);
  } catch (const json::exception& e) {
    throw std::runtime_error("'" + path + "': not valid JSON: " + e.what());
  }
  if (!j.is_object()) fail("the file", "is not a JSON object");
  auto get = [&](const json& o, const char* key) {
    return o.is_object() && o.contains(key) ? o[key] : json();
  };
  auto expect = [&](const std::string& field, const json& got, const json& want) {
    if (got != want) fail(field, "is " + got.dump() + ", expected " + want.dump());
  };
  expect("normalizer", get(j, "normalizer"), nullptr);
  expect("truncation", get(j, "truncation"), nullptr);
  expect("padding", get(j, "padding"), nullptr);
  expect("pre_tokenizer", get(j, "pre_tokenizer"), metaspace("Metaspace"));
  const json post = get(j, "post_processor");
  expect("post_processor.type", get(post, "type"), "TemplateProcessing");
  expect("post_processor.single", get(post, "single"),
         json::parse(R"([{"SpecialToken":{"id":"<s>","type_id":0}},{"Sequence":{"id":"A","type_id":0}}])"));
  expect("post_processor.special_tokens['<s>'].ids", get(get(get(post, "special_tokens"), "<s>"), "ids"),
         json::array({kBos}));
  const json dec = get(j, "decoder");
  llama_decoder_ = dec == llama_decoder();
  if (!llama_decoder_ && dec != metaspace("Metaspace"))
    fail("decoder", "is " + dec.dump() + ", expected " + llama_decoder().dump() + " or " +
                        metaspace("Metaspace").dump());

  const json m = get(j, "model");
  expect("model.type", get(m, "type"), "BPE");
  expect("model.byte_fallback", get(m, "byte_fallback"), true);
  expect("model.unk_token", get(m, "unk_token"), "<unk>");
  for (const char* key : {"dropout", "continuing_subword_prefix", "end_of_word_suffix"})
    expect(std::string("model.") + key, get(m, key), nullptr);
  if (get(m, "ignore_merges") != json(false) && !get(m, "ignore_merges").is_null())
    fail("model.ignore_merges", "is " + get(m, "ignore_merges").dump() + ", expected false");

  const json vocab = get(m, "vocab");
  if (!vocab.is_object() || vocab.empty()) fail("model.vocab", "is not a non-empty object");
  pieces_.assign(vocab.size(), std::string());
  std::vector<bool> seen(vocab.size());
  for (const auto& [piece, id] : vocab.items()) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() >= (int64_t)vocab.size() ||
        seen[id.get<int64_t>()])
      fail("model.vocab['" + piece + "']", "= " + id.dump() + ": ids must be 0..size-1, each once");
    seen[id.get<int64_t>()] = true;
    pieces_[id.get<int64_t>()] = piece;
    ids_[piece] = id.get<int32_t>();
  }
  const char* fixed[] = {"<unk>", "<s>", "</s>"};
  for (int32_t i = 0; i < 259; ++i) {
    char byte[8];
    std::snprintf(byte, sizeof byte, "<0x%02X>", i - 3);
    const std::string want = i < 3 ? fixed[i] : byte;
    if (i >= (int32_t)pieces_.size() || pieces_[i] != want)
      fail("model.vocab", "has no '" + want + "' at id " + std::to_string(i));
  }

  const json merges = get(m, "merges");
  if (!merges.is_array()) fail("model.merges", "is not a list");
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const json& e = merges[rank];
    std::string a, b;
    if (e.is_array() && e.size() == 2 && e[0].is_string() && e[1].is_string()) {
      a = e[0].get<std::string>();
      b = e[1].get<std::string>();
    } else if (e.is_string() && e.get<std::string>().find(' ') != std::string::npos) {  // older "a b" form
      const std::string s = e.get<std::string>();
      a = s.substr(0, s.find(' '));
      b = s.substr(s.find(' ') + 1);
    } else {
      fail("model.merges[" + std::to_string(rank) + "]", "= " + e.dump() + " is not a pair");
    }
    const auto ia = ids_.find(a), ib = ids_.find(b), iab = ids_.find(a + b);
    if (ia == ids_.end() || ib == ids_.end() || iab == ids_.end())
      fail("model.merges[" + std::to_string(rank) + "]",
           "= " + e.dump() + " has a piece outside the vocabulary");
    merges_[{ia->second, ib->second}] = {(int32_t)rank,
                                         iab->second};  // a repeated pair: the last wins, as in tokenizers
  }

  special_.assign(pieces_.size(), false);
  const json added = get(j, "added_tokens");
  if (!added.is_array()) fail("added_tokens", "is not a list");
  for (const json& t : added) {
    const json id = get(t, "id"), content = get(t, "content");
    if (!id.is_number_integer() || !content.is_string() || id.get<int64_t>() < 0 ||
        id.get<int64_t>() >= (int64_t)pieces_.size() ||
        pieces_[id.get<int64_t>()] != content.get<std::string>())
      fail("added_tokens", "entry " + t.dump() + " is not a token of the vocabulary");
    for (const char* key : {"single_word", "lstrip", "rstrip", "normalized"})
      expect("added_tokens '" + content.get<std::string>() + "' " + key, get(t, key), false);
    special_[id.get<int64_t>()] = get(t, "special") == json(true);
    if (!content.get<std::string>().empty())
      added_.push_back({content.get<std::string>(), id.get<int32_t>()});
  }
}

}  // namespace kvlab
