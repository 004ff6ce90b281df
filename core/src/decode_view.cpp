#include "kvlab/decode_view.h"

#include <algorithm>
#include <stdexcept>
#include <string>
#include <vector>

#include "methods/uniform.h"

namespace kvlab {

Schedule Method::decode_schedule(int64_t) const {
  throw std::invalid_argument("method '" + spec() + "' has no decode rule (docs/FORMATS.md section 12)");
}

namespace {

// Rows [0, n) of each (T, D) slice of x, as fp32 of shape (..., n, D).
Tensor prefix(const TensorView& x, int64_t n) {
  const int64_t T = x.shape[x.shape.size() - 2], D = x.shape.back(), N = x.numel() / (T * D);
  Tensor out;
  out.shape = x.shape;
  out.shape[out.shape.size() - 2] = n;
  out.data.resize((size_t)(N * n * D));
  for (int64_t s = 0; s < N; ++s) methods::load(x, s * T * D, n * D, &out.data[(size_t)(s * n * D)]);
  return out;
}

// Rows [b, e) of every slice of src (..., Ts, D) into dst (..., Td, D).
void copy_rows(const Tensor& src, Tensor& dst, int64_t b, int64_t e) {
  const int64_t Ts = src.shape[src.shape.size() - 2], Td = dst.shape[dst.shape.size() - 2],
                D = dst.shape.back(), N = (int64_t)dst.data.size() / (Td * D);
  for (int64_t s = 0; s < N && e > b; ++s)
    std::copy_n(&src.data[(size_t)((s * Ts + b) * D)], (e - b) * D, &dst.data[(size_t)((s * Td + b) * D)]);
}

void check_step(const TensorView& k, const TensorView& v, int64_t t) {
  methods::check_inputs(k, v);
  const int64_t T = k.shape[k.shape.size() - 2];
  if (t < 0 || t >= T)
    throw std::invalid_argument("decode_view: step " + std::to_string(t) + " outside the " +
                                std::to_string(T) + " tokens given");
}

// apply() on the first `n_apply` rows, padded with the fp16 input up to `n` rows.
Reconstruction applied_prefix(const Method& m, const TensorView& k, const TensorView& v, int64_t n_apply,
                              int64_t n, const HeadContext& at) {
  Tensor k16 = methods::full_precision(prefix(k, n).view()),
         v16 = methods::full_precision(prefix(v, n).view());
  if (n_apply < 0 || n_apply > n)
    throw std::logic_error("method '" + m.spec() + "': decode_apply_tokens out of range");
  if (n_apply == 0) return {std::move(k16), std::move(v16)};
  const Tensor kp = prefix(k, n_apply), vp = prefix(v, n_apply);
  // pre-RoPE keys (kvquant) are cut to the same prefix
  HeadContext cut = at;
  Tensor pre;
  if (at.k_pre_rope.data) {
    if (at.k_pre_rope.shape != k.shape)
      throw std::invalid_argument("decode: k_pre_rope " + shape_string(at.k_pre_rope.shape) +
                                  " is not shaped as k " + shape_string(k.shape));
    pre = prefix(at.k_pre_rope, n_apply);
    cut.k_pre_rope = pre.view();
  }
  const Reconstruction r = m.apply(kp.view(), vp.view(), cut);
  copy_rows(r.k, k16, 0, n_apply);
  copy_rows(r.v, v16, 0, n_apply);
  return {std::move(k16), std::move(v16)};
}

// The rule of one layer's method: its own, or each KV head's (a per-head plan's layer).
void check_layer_decodable(const Method& m) {
  const std::vector<const Method*> heads = m.per_head();
  if (heads.empty()) {
    (void)m.decode_schedule(1);
    return;
  }
  for (size_t h = 0; h < heads.size(); ++h) try {
      (void)heads[h]->decode_schedule(1);
    } catch (const std::invalid_argument& e) {
      throw std::invalid_argument("KV head " + std::to_string(h) + ": " + e.what());
    }
}

}  // namespace

void check_decodable(const Method& m) {
  const std::vector<const Method*> layers = m.per_layer();
  if (layers.empty()) {
    check_layer_decodable(m);
    return;
  }
  for (size_t l = 0; l < layers.size(); ++l) try {
      check_layer_decodable(*layers[l]);
    } catch (const std::invalid_argument& e) {
      throw std::invalid_argument("method '" + m.spec() + "', layer " + std::to_string(l) + ": " + e.what());
    }
}

const Method& layer_method(const Method& m, int64_t layer) {
  const std::vector<const Method*> layers = m.per_layer();
  if (layers.empty()) return m;
  if (layer < 0 || layer >= (int64_t)layers.size())
    throw std::invalid_argument("method '" + m.spec() + "' has no layer " + std::to_string(layer) +
                                " (it holds " + std::to_string(layers.size()) + ")");
  return *layers[(size_t)layer];
}

const Method& head_method(const Method& m, int64_t layer, int64_t kv_head) {
  const Method& l = layer_method(m, layer);
  const std::vector<const Method*> heads = l.per_head();
  if (heads.empty()) return l;
  if (kv_head < 0 || kv_head >= (int64_t)heads.size())
    throw std::invalid_argument("method '" + m.spec() + "', layer " + std::to_string(layer) +
                                " has no KV head " + std::to_string(kv_head) + " (it holds " +
                                std::to_string(heads.size()) + ")");
  return *heads[(size_t)kv_head];
}

Reconstruction decode_view(const Method& whole, const TensorView& k, const TensorView& v, int64_t t,
                           const HeadContext& at) {
  check_step(k, v, t);
  const Method& m = head_method(whole, at.layer, at.kv_head);
  const int64_t n = t + 1;
  const Schedule s = m.decode_schedule(n);
  const Reconstruction q = applied_prefix(m, k, v, m.decode_apply_tokens(n), n, at);
  Reconstruction out{methods::full_precision(prefix(k, n).view()),
                     methods::full_precision(prefix(v, n).view())};
  copy_rows(q.k, out.k, s.key_begin, s.key_end);
  copy_rows(q.v, out.v, s.value_begin, s.value_end);
  return out;
}

Reconstruction decode_final(const Method& whole, const TensorView& k, const TensorView& v,
                            const HeadContext& at) {
  methods::check_inputs(k, v);
  const Method& m = head_method(whole, at.layer, at.kv_head);
  const int64_t T = k.shape[k.shape.size() - 2];
  return applied_prefix(m, k, v, m.decode_apply_tokens(T), T, at);
}

}  // namespace kvlab
