// Decode-faithful views of a KV method (docs/FORMATS.md section 12): query position t sees the
// cache exactly as the method holds it after t + 1 tokens were appended one at a time. A method
// states its streaming rule through Method::decode_schedule (which token ranges are quantized
// after n tokens) and Method::decode_apply_tokens; a quantized token's bytes depend only on
// tokens the cache already had when it was written, so one apply() over the sequence gives every
// step's bytes (decode_final) and each step picks its ranges (decode_schedule). kvlab ppl (the
// runner) and the Python package use these; tests/core/decode_view_test.cpp checks the rule of
// every family against decode_view, which rebuilds one step from its prefix alone.
#pragma once
#include <cstdint>

#include "kvlab/method.h"

namespace kvlab {

// Throws std::invalid_argument naming the method (a per-layer method: the layer too) and why it
// has no streaming rule.
void check_decodable(const Method& m);

// The method whose rule serves layer `layer`: a per-layer method's choice for it (plan), m
// itself otherwise. Throws std::invalid_argument for a layer the per-layer method does not hold.
const Method& layer_method(const Method& m, int64_t layer);

// The method whose rule serves KV head `kv_head` of layer `layer`: layer_method's, or, where
// that one holds one method per KV head (a per-head plan's layer whose heads differ), the head's
// own. Throws std::invalid_argument for a layer or head the method does not hold.
const Method& head_method(const Method& m, int64_t layer, int64_t kv_head);

// The cache one head holds after t + 1 tokens, from k, v (..., T, D), t < T: apply() on the
// first decode_apply_tokens(t + 1) tokens, kept on the ranges of decode_schedule(t + 1), and the
// fp16 input everywhere else (all of head_method(m, at.layer, at.kv_head)). Shape (..., t + 1, D), fp32. Slow
// on purpose (one step from its own prefix): the reference the fast paths are tested against.
Reconstruction decode_view(const Method& m, const TensorView& k, const TensorView& v, int64_t t,
                           const HeadContext& at = {});

// Every step's quantized bytes at once: apply() on the first decode_apply_tokens(T) tokens,
// shaped (..., T, D) with the fp16 input in the rows apply() did not see. Row j of step t's view
// is this row where j is in decode_schedule(t + 1), the fp16 input otherwise.
Reconstruction decode_final(const Method& m, const TensorView& k, const TensorView& v,
                            const HeadContext& at = {});

// Whether token j is quantized in the view of step t (a range of decode_schedule(t + 1)).
inline bool in_range(int64_t j, int64_t begin, int64_t end) { return j >= begin && j < end; }

}  // namespace kvlab
