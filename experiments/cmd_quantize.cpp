// kvlab quantize --input X.npy --quantizer SPEC --out OUT.npz
#include <cstdio>
#include <stdexcept>

#include "cli_options.h"
#include "common.h"
#include "kvlab/half.h"
#include "kvlab/npy.h"
#include "kvlab/path_checks.h"
#include "kvlab/quantizer.h"

namespace kvlab::cli {
namespace {

struct QuantizeArgs {
  std::string input, spec, out;
};

NpyArray params_array(const std::vector<float>& v, ParamType t, std::vector<int64_t> shape) {
  if (t == ParamType::F32) return make_npy(v, std::move(shape));
  std::vector<uint16_t> h(v.size());
  for (size_t i = 0; i < v.size(); ++i) h[i] = float_to_half(v[i]);
  return make_npy(h, std::move(shape));
}

void run(const QuantizeArgs& a) {
  check_input_file({"--input", a.input});
  check_outputs_not_inputs({{"--out", a.out}}, {{"--input", a.input}});
  const NpyArray x = read_npy(a.input);
  const TensorView view = as_tensor(x, a.input);
  if (view.shape.size() < 2 || view.shape.size() > 4)
    throw std::invalid_argument("'" + a.input + "': shape " + shape_string(view.shape) +
                                " is not (T, D), (H, T, D) or (B, H, T, D)");
  const QuantizerSpec spec = parse_quantizer(a.spec);
  const QuantizedTensor q = quantize(view, spec);
  const PartShapes shapes = part_shapes(q);
  std::vector<std::pair<std::string, NpyArray>> arrays;
  arrays.emplace_back("q", make_npy(unpack_codes(q), view.shape));
  arrays.emplace_back("dequant", make_npy(dequantize(q), view.shape));
  arrays.emplace_back("codes", make_npy(q.codes, shapes.codes));
  if (spec.boosted()) {
    arrays.emplace_back("high", make_npy(q.high, shapes.high));
    arrays.emplace_back("boost_index", make_npy(q.boost_index, shapes.boost_index));
  }
  arrays.emplace_back("scale", params_array(q.scale, spec.params, shapes.params));
  if (spec.scheme == Scheme::Asym)
    arrays.emplace_back("zero", params_array(q.zero, spec.params, shapes.params));
  write_npz(a.out, arrays);
  std::printf("%s: %s %s -> %s  (%s, %.4f bits/element)\n", a.input.c_str(), x.descr.c_str(),
              shape_string(view.shape).c_str(), a.out.c_str(), to_string(spec).c_str(), bits_per_element(q));
}

}  // namespace

static void add_quantize(CLI::App& app) {
  auto args = std::make_shared<QuantizeArgs>();
  auto* c =
      app.add_subcommand("quantize", "Quantize a .npy tensor (T, D), (H, T, D) or (B, H, T, D) into an .npz");
  c->add_option("--input", args->input, "fp16 or fp32 .npy file")->required();
  c->add_option("--quantizer", args->spec,
                "key=value,... over scheme=asym|sym, bits=1..8, axis=channel|token, group=G|all, "
                "params=fp16|fp32, profile=kvlab|kivi|kitty-sim, boost=RATIO")
      ->required();
  add_out_option(c, args->out, "output .npz (arrays q, codes, scale, zero, dequant[, high, boost_index])")
      ->required();
  c->callback([args] { run(*args); });
}

KVLAB_COMMAND(30, add_quantize);

}  // namespace kvlab::cli
