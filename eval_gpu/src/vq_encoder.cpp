// One KV head of a vq method's decode cache, encoded by vq/ (kvlab_eval_gpu/vq_encoder.h).
#include "kvlab_eval_gpu/vq_encoder.h"

#include <vector>

#include "kvlab/vq.h"
#include "kvlab/vq_method.h"
#include "kvlab_gpu/attention.h"

namespace kvlab {

namespace {

gpu::VqHead encode_vq(const Method& m, const TensorView& k, const TensorView& v, int64_t kv_head) {
  gpu::VqHead out;
  out.layer = vq_method_first_layer(m);
  const int64_t T = k.shape[1], D = k.shape[2];
  const VqMethodBooks b = vq_method_books(m, out.layer, kv_head, D);
  out.vec = b.k.spec.vec;
  out.bits = b.k.spec.bits;
  out.stages = b.k.spec.stages;
  out.k_books = b.k.data;
  out.v_books = b.v.data;
  auto widen = [](const TensorView& x) {
    std::vector<float> w(x.numel());
    for (int64_t i = 0; i < x.numel(); ++i) w[i] = x.at(i);
    return w;
  };
  out.k_codes = vq_encode(b.k, widen(k).data(), T, 1);
  out.v_codes = vq_encode(b.v, widen(v).data(), T, 1);
  return out;
}

}  // namespace

void install_vq_encoder() { gpu::set_vq_encoder(encode_vq); }

}  // namespace kvlab
