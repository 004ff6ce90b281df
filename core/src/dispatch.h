// Turn runtime choices (profile, input dtype) into template arguments of the loops.
#pragma once
#include <cstdint>
#include <type_traits>

#include "kvlab/half.h"
#include "kvlab/recipe.h"
#include "kvlab/spec.h"
#include "kvlab/tensor.h"

namespace kvlab::detail {

template <class F>
void with_recipe(Profile p, F&& f) {
  switch (p) {
    case Profile::Kvlab: f(KvlabRecipe{}); return;
    case Profile::Kivi: f(KiviRecipe{}); return;
    case Profile::KittySim: f(KittySimRecipe{}); return;
  }
}

template <class F>
void with_input(const TensorView& x, F&& f) {
  if (x.dtype == DType::F16)
    f(static_cast<const uint16_t*>(x.data));
  else
    f(static_cast<const float*>(x.data));
}

}  // namespace kvlab::detail
