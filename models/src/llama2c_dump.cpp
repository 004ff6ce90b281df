// A llama2.c generation as a KV dump: its metadata and the write through DumpWriter.
#include "kvlab/llama2c.h"

namespace kvlab {

DumpInfo llama2c_dump_info(const Llama2cModel& model, const Generation& gen, const std::string& model_name,
                           const std::string& source) {
  const Llama2cConfig& c = model.config;
  DumpInfo info;
  info.model = model_name;
  info.num_layers = c.n_layers;
  info.num_q_heads = c.n_heads;
  info.num_kv_heads = c.n_kv_heads;
  info.head_dim = c.head_dim();
  info.tokens = (int64_t)gen.tokens.size();
  info.rope_theta = 10000.0;  // run.c's fixed base
  info.rope_style = RopeStyle::Adjacent;
  info.k_after_rope = true;
  info.has_k_pre_rope = true;
  info.dtype = CaptureDtype::F32;
  info.token_ids = gen.tokens;
  info.text = gen.text;
  info.source = source;
  info.validate("llama2.c dump of '" + model.path + "'");
  return info;
}

void write_llama2c_dump(const std::string& path, const Llama2cModel& model, const Generation& gen,
                        const std::string& model_name, const std::string& source, DumpWriteOptions options) {
  write_generation_dump(path, llama2c_dump_info(model, gen, model_name, source), gen, options);
}

}  // namespace kvlab
