// A generation as a KV dump: every layer's q, k, v and k_pre_rope through DumpWriter.
#include "kvlab/generate.h"

namespace kvlab {

void write_generation_dump(const std::string& path, const DumpInfo& info, const Generation& gen,
                           DumpWriteOptions options) {
  DumpWriter writer(path, info, options);
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
