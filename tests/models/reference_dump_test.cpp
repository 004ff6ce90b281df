// models reference_dump.h on a tiny random Llama with the reference tokenizer (a real model
// takes seconds): made once, then reused untouched; a damaged cache file is detected and made
// again with the same content; a changed model gets another file; missing pieces are named.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "kvlab/dump.h"
#include "kvlab/reference_dump.h"
#include "tiny_hf_model.h"

namespace {

using namespace kvlab;
using namespace kvlab_test;
using ::testing::HasSubstr;

const std::string kTokenizer = std::string(KVLAB_SOURCE_DIR) + "/data/kvlab-ref-18m/tokenizer.json";

// The tiny model with the reference tokenizer (8192 ids) and a held-out text, and an empty cache.
struct Fixture {
  json config = [] {
    json c = tiny_config();
    c["vocab_size"] = 8192;
    return c;
  }();
  ModelDir model{config, tiny_tensors(8192)};
  fs::path cache = model.dir / "cache";
  Fixture() {
    fs::copy_file(kTokenizer, model.dir / "tokenizer.json");
    std::ofstream(model.dir / "heldout.txt")
        << "It was the best of times, it was the worst of times, it was the "
           "age of wisdom, it was the age of foolishness.\n";
  }
  ReferenceDumpOptions options() const {
    ReferenceDumpOptions o;
    o.model_dir = model.str();
    o.cache_dir = cache.string();
    o.tokens = 24;
    o.quiet = true;
    return o;
  }
};

Tensor q0(const std::string& path) { return open_dump(path)->read(0, Role::Q); }

TEST(ReferenceDump, MadeOnceThenReused) {
  if (!fs::exists(kTokenizer)) GTEST_SKIP() << kTokenizer << " not found";
  Fixture f;
  const ReferenceDump first = reference_dump(f.options());
  EXPECT_TRUE(first.made);
  EXPECT_TRUE(fs::exists(first.path + ".fnv64"));
  const auto info = open_dump(first.path)->info();
  EXPECT_EQ(info.tokens, 24);
  EXPECT_EQ(info.num_layers, 2);
  const auto mtime = fs::last_write_time(first.path);
  const ReferenceDump second = reference_dump(f.options());
  EXPECT_FALSE(second.made);
  EXPECT_EQ(second.path, first.path);
  EXPECT_EQ(fs::last_write_time(second.path), mtime);
}

TEST(ReferenceDump, DamagedCacheIsMadeAgain) {
  if (!fs::exists(kTokenizer)) GTEST_SKIP() << kTokenizer << " not found";
  Fixture f;
  const ReferenceDump first = reference_dump(f.options());
  const Tensor want = q0(first.path);
  {
    std::fstream io(first.path, std::ios::in | std::ios::out | std::ios::binary);
    io.seekp(-100, std::ios::end);  // one byte, as a disk error or a stray write would
    io.put('\x5a');
  }
  const ReferenceDump again = reference_dump(f.options());
  EXPECT_TRUE(again.made);
  EXPECT_EQ(q0(again.path).data, want.data);
  // A missing checksum file (a writer killed between the dump and it) counts as damage too.
  fs::remove(again.path + ".fnv64");
  EXPECT_TRUE(reference_dump(f.options()).made);
  EXPECT_FALSE(reference_dump(f.options()).made);
}

TEST(ReferenceDump, ChangedModelGetsAnotherFile) {
  if (!fs::exists(kTokenizer)) GTEST_SKIP() << kTokenizer << " not found";
  Fixture f;
  const ReferenceDump first = reference_dump(f.options());
  Tensors t = tiny_tensors(8192);
  t["model.norm.weight"].bytes[0] ^= 1;
  write_bytes(f.model.weights(), safetensors_bytes(t));
  const ReferenceDump second = reference_dump(f.options());
  EXPECT_TRUE(second.made);
  EXPECT_NE(second.path, first.path);
  ReferenceDumpOptions fewer = f.options();
  fewer.tokens = 23;  // other token ids: another file too
  EXPECT_NE(reference_dump(fewer).path, second.path);
}

TEST(ReferenceDump, MissingPiecesAreNamed) {
  if (!fs::exists(kTokenizer)) GTEST_SKIP() << kTokenizer << " not found";
  Fixture f;
  ReferenceDumpOptions o = f.options();
  o.model_dir = (f.model.dir / "absent").string();
  try {
    reference_dump(o);
    FAIL() << "no error for a missing model directory";
  } catch (const std::runtime_error& e) {
    EXPECT_THAT(e.what(), HasSubstr("absent"));
    EXPECT_THAT(e.what(), HasSubstr("pass a dump"));
  }
  o = f.options();
  o.tokens = 100000;
  try {
    reference_dump(o);
    FAIL() << "no error for a held-out text shorter than the dump";
  } catch (const std::runtime_error& e) {
    EXPECT_THAT(e.what(), HasSubstr("heldout.txt"));
  }
  o = f.options();
  o.cache_dir = (f.model.dir / "config.json").string();  // a file, not a directory
  try {
    reference_dump(o);
    FAIL() << "no error for a cache directory that is a file";
  } catch (const std::runtime_error& e) {
    EXPECT_THAT(e.what(), HasSubstr("cache directory"));
  }
}

}  // namespace
