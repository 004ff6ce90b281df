// kvlab._kvlab: the compiled half of the Python package (bindings/python/kvlab wraps it).
#include "common.h"
#include "kvlab/plan.h"
#include "kvlab/vq_method.h"

PYBIND11_MODULE(_kvlab, m) {
  m.doc() =
      "kvlab's C++ libraries (core, io, models, eval, calibration, vq) for Python; see the kvlab package.";
  kvlab::register_vq_method();  // the `vq` and `kvquant` families, as the kvlab CLI registers them
  kvlab::register_plan_method();
  kvlab::bind::register_errors(m);
  kvlab::bind::bind_quantize(m);
  kvlab::bind::bind_methods(m);
  kvlab::bind::bind_dumps(m);
  kvlab::bind::bind_studies(m);
  kvlab::bind::bind_vq(m);
  kvlab::bind::bind_gpu(m);
  kvlab::bind::bind_attention(m);
}
