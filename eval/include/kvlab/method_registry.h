// Methods outside core's spec grammar (`family:args`, e.g. `vq:codebooks=CB.h5`), added by other
// libraries or the CLI without touching core: a family registers a factory, and kvlab eval
// consults the registry before core's parse_method. Core's methods are unaffected.
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "kvlab/method.h"
#include "kvlab/tensor.h"

namespace kvlab {

struct EvalShape;

struct CustomMethod {
  std::string spec;   // canonical string, reported as the method's spec
  Bits bits;          // bits per element of a T-token cache
  Schedule schedule;  // quantized token ranges (reconstruction errors are taken over these)
  // K_hat and V_hat (each shaped as k, v: (1, T, D), fp32) for one KV head of one layer.
  std::function<Reconstruction(int64_t layer, int64_t kv_head, const TensorView& k, const TensorView& v)>
      apply;
};

// args: the text after "family:". Throws std::invalid_argument for bad args or a mismatch
// with the dump's shape (a codebook file for another model, say).
using CustomMethodFactory = std::function<CustomMethod(const std::string& args, const EvalShape& shape)>;

// Registration is static (like KVLAB_COMMAND): returns a dummy for `static const int x = ...`.
int register_method_family(const std::string& family, CustomMethodFactory factory);
// The factory for text "family:args", or null when the family is not registered.
const CustomMethodFactory* find_method_family(const std::string& text, std::string* args);
std::vector<std::string> custom_method_families();

}  // namespace kvlab
