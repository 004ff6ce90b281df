// A llama2.c generation as a KV dump: its metadata and the write through DumpWriter.
#include "kvlab/llama2c.h"

namespace kvlab {

DumpInfo llama2c_dump_info(const Llama2cModel& model, const Llama2cGeneration& gen,
                           const std::string& model_name, const std::string& source) {
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

void write_llama2c_dump(const std::string& path, const Llama2cModel& model, const Llama2cGeneration& gen,
                        const std::string& model_name, const std::string& source, DumpWriteOptions options) {
  DumpWriter writer(path, llama2c_dump_info(model, gen, model_name, source), options);
  for (int64_t l = 0; l < (int64_t)gen.kv.size(); ++l) {
    const LayerKV& kv = gen.kv[l];
    writer.write(l, Role::Q, kv.q.view());
    writer.write(l, Role::K, kv.k.view());
    writer.write(l, Role::V, kv.v.view());
    writer.write(l, Role::KPreRope, kv.k_pre_rope.view());
  }
  writer.commit();
}

}  // namespace kvlab
