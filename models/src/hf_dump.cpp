// A Hugging Face model's generation as a KV dump: its metadata.
#include "kvlab/hf_model.h"

namespace kvlab {

DumpInfo hf_dump_info(const HfModel& model, const Generation& gen, const std::string& model_name,
                      const std::string& source) {
  const TransformerConfig& c = model.config.t;
  DumpInfo info;
  info.model = model_name;
  info.num_layers = c.n_layers;
  info.num_q_heads = c.n_heads;
  info.num_kv_heads = c.n_kv_heads;
  info.head_dim = c.head_dim;
  info.tokens = (int64_t)gen.tokens.size();
  info.rope_theta = c.rope_theta;
  info.rope_style = RopeStyle::Halves;
  info.k_after_rope = true;
  info.has_k_pre_rope = true;
  info.dtype = CaptureDtype::F32;  // computed in fp32 whatever the weights' dtype
  info.token_ids = gen.tokens;
  info.text = gen.text;
  info.source = source;
  info.validate("dump of '" + model.config.dir + "'");
  return info;
}

}  // namespace kvlab
