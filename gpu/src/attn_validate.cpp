// Decode attention vs the fp64 reference over core's K_hat / V_hat, and the kernel's own
// dequantized values (debug path) vs Method::apply, byte for byte.
#include <cmath>
#include <cstring>
#include <optional>
#include <random>
#include <stdexcept>

#include "attn_cache.h"
#include "kvlab_gpu/attention.h"

namespace kvlab::gpu {

namespace {

struct Case {
  int Hq, Hkv, D;
  std::vector<int> lens;
  int splits;  // 0: auto
};

// Keys with a few large channels (as real keys), values and queries roughly unit normal.
std::vector<float> draw(std::mt19937_64& rng, int H, int L, int D, bool keys) {
  std::normal_distribution<float> n(0.0f, 1.0f);
  std::vector<float> x((size_t)H * L * D);
  for (size_t i = 0; i < x.size(); ++i) x[i] = n(rng) * (keys && (i % D) % 37 == 5 ? 8.0f : 1.0f);
  return x;
}

std::string lens_text(const std::vector<int>& lens) {
  std::string s;
  for (int L : lens) {
    if (!s.empty()) s += ',';
    s += std::to_string(L);
  }
  return s;
}

// Empty where the streaming kernel is asked for and does not serve the cache (its own rules:
// e.g. Kitty pages with more boosted channels than it holds): the case is skipped, not failed.
std::optional<AttnValidationRow> run_case(const Method& m, const Case& c, DecodeKernel kernel,
                                          std::mt19937_64& rng) {
  const int B = (int)c.lens.size();
  std::vector<std::vector<float>> ks, vs;
  std::vector<TensorView> kv, vv;
  for (int L : c.lens) {
    ks.push_back(draw(rng, c.Hkv, L, c.D, true));
    vs.push_back(draw(rng, c.Hkv, L, c.D, false));
  }
  for (int b = 0; b < B; ++b) {
    kv.push_back({ks[b].data(), DType::F32, {c.Hkv, c.lens[b], c.D}});
    vv.push_back({vs[b].data(), DType::F32, {c.Hkv, c.lens[b], c.D}});
  }
  std::vector<float> q = draw(rng, B * c.Hq, 1, c.D, false);
  const auto cache = make_decode_cache(m, kv, vv);
  if (kernel == DecodeKernel::Stream && pick_kernel(*cache, c.Hq, DecodeKernel::Auto) != kernel) return {};
  DecodeOptions opt;
  opt.splits = c.splits;
  opt.debug = true;
  opt.kernel = kernel;
  const DecodeResult r = decode_attention(*cache, q, c.Hq, opt);
  AttnValidationRow row;
  row.method = m.spec();
  row.lengths = lens_text(c.lens);
  row.Hq = c.Hq;
  row.Hkv = c.Hkv;
  row.D = c.D;
  row.splits = r.splits;
  row.kernel = decode_kernel_name(r.kernel);
  int64_t off = 0;
  for (int b = 0; b < B; ++b) {
    const Reconstruction hat = decode_method_apply(m, kv[b], vv[b], cache->impl().vq_layer);
    const int64_t n = (int64_t)c.Hkv * c.lens[b] * c.D;
    const uint8_t* want[2] = {reinterpret_cast<const uint8_t*>(hat.k.data.data()),
                              reinterpret_cast<const uint8_t*>(hat.v.data.data())};
    const uint8_t* got[2] = {reinterpret_cast<const uint8_t*>(r.k_hat.data() + off),
                             reinterpret_cast<const uint8_t*>(r.v_hat.data() + off)};
    for (int role = 0; role < 2; ++role)
      for (int64_t i = 0; i < n * 4; ++i) row.hat_mismatches += want[role][i] != got[role][i];
    row.hat_bytes += 2 * n * 4;
    off += n;
    const PackedMagnitudes& mag = packed_magnitudes(*cache, b);
    const std::vector<double> ref = decode_reference(&q[(size_t)b * c.Hq * c.D], hat.k.data.data(),
                                                     hat.v.data.data(), c.Hq, c.Hkv, c.lens[b], c.D);
    for (int hq = 0; hq < c.Hq; ++hq) {
      const int kvh = hq / (c.Hq / c.Hkv);
      const size_t head = (size_t)kvh * c.lens[b] * c.D;
      const double bound = decode_error_bound(&q[((size_t)b * c.Hq + hq) * c.D], hat.k.data.data() + head,
                                              hat.v.data.data() + head, c.lens[b], c.D, r.shapes[b],
                                              mag.k.data() + head, mag.v.data() + head);
      for (int ch = 0; ch < c.D; ++ch) {
        const double o = r.out[((size_t)b * c.Hq + hq) * c.D + ch];
        const double err = std::isfinite(o) ? std::fabs(o - ref[(size_t)hq * c.D + ch]) : HUGE_VAL;
        row.max_err = std::max(row.max_err, err);
        row.max_err_over_bound = std::max(row.max_err_over_bound, err / bound);
      }
    }
  }
  return row;
}

}  // namespace

std::vector<AttnValidationRow> validate_attention(const AttnValidateOptions& opt) {
  std::vector<std::string> methods = opt.methods;
  if (methods.empty()) {
    methods = {"fp16", "int8", "kivi-4", "kivi-2", "kivi-2-sink", "kitty"};
    methods.insert(methods.end(), opt.extra_methods.begin(), opt.extra_methods.end());
  }
  // lengths: 1, below a group, not a multiple of the group, exactly a group, several tiles
  std::vector<Case> cases = {
      {32, 8, 128, {1, 5, 127, 128}, 0},
      {32, 8, 128, {129, 300, 1000}, 0},
      {8, 2, 64, {255, 2050}, 0},
      {2, 2, 128, {700, 33}, 0},
  };
  if (!opt.small) {
    cases.push_back({32, 8, 128, {4133, 9000}, 0});
    cases.push_back({32, 8, 128, {4133, 9000}, 1});
    cases.push_back({32, 8, 128, {20000}, 7});
    cases.push_back({32, 8, 128, {4112, 48}, 3});  // 16-byte rows whose last tile is partial (int8)
  }
  std::mt19937_64 rng(opt.seed);
  std::vector<AttnValidationRow> rows;
  for (const std::string& name : methods) {
    const MethodPtr m = parse_method(name);
    const bool vq = m->family() == "vq";
    for (const Case& c : cases) {
      // the same data for every kernel of a case
      const std::mt19937_64 start = rng;
      // codebook caches: their kernel only (head_dim 128); the others never run it
      if (vq ? c.D != 128 || opt.kernel == DecodeKernel::Split || opt.kernel == DecodeKernel::Stream
             : opt.kernel == DecodeKernel::Codebook)
        continue;
      std::optional<AttnValidationRow> row = run_case(*m, c, opt.kernel, rng);
      if (!row) continue;
      rows.push_back(*row);
      if (opt.kernel == DecodeKernel::Auto && row->kernel == std::string("stream")) {
        std::mt19937_64 again = start;
        rows.push_back(*run_case(*m, c, DecodeKernel::Split, again));
      }
    }
  }
  return rows;
}

void print_attention_validation(const std::vector<AttnValidationRow>& rows, std::FILE* out) {
  std::fprintf(out, "%-72s %-16s %-6s %3s %3s %3s %6s %12s %10s %10s %8s %s\n", "method", "lengths", "kernel",
               "Hq", "Hkv", "D", "splits", "hat_bytes", "hat_diff", "max_err", "err/bnd", "ok");
  for (const auto& r : rows)
    std::fprintf(out, "%-72s %-16s %-6s %3d %3d %3d %6d %12lld %10lld %10.3g %8.3g %s\n", r.method.c_str(),
                 r.lengths.c_str(), r.kernel.c_str(), r.Hq, r.Hkv, r.D, r.splits, (long long)r.hat_bytes,
                 (long long)r.hat_mismatches, r.max_err, r.max_err_over_bound, r.ok() ? "ok" : "FAIL");
}

}  // namespace kvlab::gpu
