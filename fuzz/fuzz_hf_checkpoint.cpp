// The Hugging Face checkpoint reader: a safetensors file (header bounds, every tensor's byte
// range, each F32/F16/BF16 tensor read), or, for inputs starting with '{', a config.json.
#include <sys/stat.h>

#include <exception>

#include "fuzz_common.h"
#include "kvlab/hf_model.h"
#include "kvlab/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    if (size > 0 && data[0] == '{') {
      static const std::string dir = [] {  // a per-process directory, made once
        const std::string d = kvlab::fuzz::to_file(nullptr, 0, ".hf");
        std::remove(d.c_str());
        mkdir(d.c_str(), 0700);
        return d;
      }();
      std::rename(kvlab::fuzz::to_file(data, size, ".json").c_str(), (dir + "/config.json").c_str());
      (void)kvlab::read_hf_config(dir);
    } else {
      const kvlab::SafetensorsFile f(kvlab::fuzz::to_file(data, size, ".safetensors"));
      for (const auto& [name, e] : f.entries())
        if (e.dtype == "F32" || e.dtype == "F16" || e.dtype == "BF16") (void)f.read_f32(name, e.shape);
    }
  } catch (const std::exception&) {}
  return 0;
}
