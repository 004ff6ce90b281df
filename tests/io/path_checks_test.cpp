// check_input_file and check_outputs_not_inputs: files compared by device and inode, so other
// spellings, symlinks and hard links of an input are caught; directories where files belong are
// refused; messages name the option and the path.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "../core/test_util.h"
#include "kvlab/path_checks.h"

namespace {

using kvlab::check_input_file;
using kvlab::check_outputs_not_inputs;
using kvtest::message_of;
using kvtest::TempDir;
using ::testing::HasSubstr;
namespace fs = std::filesystem;

TEST(PathChecks, AnOutputThatIsAnInputUnderAnyNameIsRefused) {
  TempDir dir;
  const std::string in = dir.file("d.h5");
  std::ofstream(in) << "dump";
  fs::create_symlink(in, dir.file("link.h5"));
  fs::create_hard_link(in, dir.file("hard.h5"));
  for (const std::string& out :
       {in, dir.file("./d.h5"), dir.file("sub/../d.h5"), dir.file("link.h5"), dir.file("hard.h5")}) {
    fs::create_directories(dir.file("sub"));
    const std::string e = message_of<std::runtime_error>([&] {
      check_outputs_not_inputs({{"--other", dir.file("new.csv")}, {"--out", out}}, {{"DUMP", in}});
    });
    EXPECT_THAT(e, HasSubstr("--out '" + out + "' is the same file as the input DUMP '" + in + "'")) << out;
  }
  // Another file, and one that does not exist yet, are fine; so is a missing input.
  std::ofstream(dir.file("other.h5")) << "x";
  EXPECT_NO_THROW(check_outputs_not_inputs({{"--out", dir.file("other.h5")}, {"--out", dir.file("new.h5")}},
                                           {{"DUMP", in}, {"--dump", dir.file("missing.h5")}}));
}

TEST(PathChecks, AFileInsideAnInputDirectoryIsRefused) {
  TempDir dir;
  fs::create_directories(dir.file("npy/layer_0"));
  std::ofstream(dir.file("npy/layer_0/k.npy")) << "x";
  const std::string e = message_of<std::runtime_error>([&] {
    check_outputs_not_inputs({{"--out", dir.file("npy/layer_0/k.npy")}}, {{"DUMP", dir.file("npy")}});
  });
  EXPECT_THAT(e, HasSubstr("is a file inside the input DUMP"));
  EXPECT_NO_THROW(
      check_outputs_not_inputs({{"--out", dir.file("npy/new.json")}}, {{"DUMP", dir.file("npy")}}));
}

TEST(PathChecks, DirectoriesWhereFilesBelongAreRefused) {
  TempDir dir;
  fs::create_directory(dir.file("d"));
  EXPECT_THAT(message_of<std::runtime_error>([&] {
                check_outputs_not_inputs({{"--out", dir.file("d")}}, {});
              }),
              HasSubstr("--out '" + dir.file("d") + "' is a directory"));
  EXPECT_THAT(message_of<std::runtime_error>([&] {
                check_input_file({"--prompt-file", dir.file("d")});
              }),
              HasSubstr("--prompt-file '" + dir.file("d") + "' is a directory; a file is expected"));
  EXPECT_THAT(message_of<std::runtime_error>([&] {
                check_input_file({"--input", dir.file("none.npy")});
              }),
              HasSubstr("--input '" + dir.file("none.npy") + "': No such file or directory"));
  std::ofstream(dir.file("f.npy")) << "x";
  EXPECT_NO_THROW(check_input_file({"--input", dir.file("f.npy")}));
  // A missing output directory is reported before the work, not after it.
  EXPECT_THAT(message_of<std::runtime_error>([&] {
                check_outputs_not_inputs({{"--out", dir.file("none/r.json")}}, {});
              }),
              HasSubstr("--out '" + dir.file("none/r.json") + "': directory '" + dir.file("none") +
                        "': No such file or directory"));
}

}  // namespace
