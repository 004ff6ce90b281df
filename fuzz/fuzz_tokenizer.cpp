// A llama2.c tokenizer file (the vocabulary of stories260K: 512 entries), then encode/decode.
#include <exception>

#include "fuzz_common.h"
#include "kvlab/llama2c.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = kvlab::fuzz::to_file(data, size, ".tok");
  try {
    const kvlab::Llama2cTokenizer tok(path, 512);
    for (int32_t id : tok.encode("Once upon a time, a <0x0A> cat.", true, true)) (void)tok.decode(1, id);
  } catch (const std::exception&) {}
  return 0;
}
