// Paths from the command line, checked before any work: an input a command reads as a file is
// one (not a directory), and no output is an input. Outputs and inputs are compared by device
// and inode, not by name, so `./a.h5`, a symlink or a hard link to the input are all caught.
#pragma once
#include <string>
#include <vector>

namespace kvlab {

// A path and the option (or argument) it came from, for messages: {"--input", "x.npy"}.
struct NamedPath {
  std::string option, path;
};

// Throws std::runtime_error naming the option and path when the path cannot be read (the OS
// reason) or is a directory.
void check_input_file(const NamedPath& in);

// Throws std::runtime_error when an output's directory does not exist (the OS reason), when an
// output exists and is a directory, or is the same file as an
// input, or is a file inside an input directory (a dump directory of .npy files). Inputs that do
// not exist are skipped: their readers report them.
void check_outputs_not_inputs(const std::vector<NamedPath>& outputs, const std::vector<NamedPath>& inputs);

}  // namespace kvlab
