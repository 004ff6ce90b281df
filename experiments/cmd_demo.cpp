// kvlab demo: every preset (or the methods given) on the built-in synthetic K/V tensor;
// reconstruction error vs bits.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>

#include "cli_options.h"
#include "common.h"
#include "kvlab/method.h"
#include "kvlab/selection.h"
#include "kvlab/sizes.h"
#include "kvlab/synthetic.h"

namespace kvlab::cli {
namespace {

struct Err {
  double mse = 0, max_abs = 0, rel = 0;
};

Err error_of(const Tensor& ref, const Tensor& hat) {
  double se = 0, ss = 0, mx = 0;
  for (size_t i = 0; i < ref.data.size(); ++i) {
    const double d = (double)ref.data[i] - hat.data[i];
    se += d * d;
    ss += (double)ref.data[i] * ref.data[i];
    mx = std::max(mx, std::fabs(d));
  }
  return {se / ref.data.size(), mx, std::sqrt(se / ss)};
}

}  // namespace

static void add_demo(CLI::App& app) {
  auto p = std::make_shared<SyntheticParams>();
  auto methods = std::make_shared<std::vector<std::string>>();
  p->tokens = 2048;
  auto* c = app.add_subcommand("demo",
                               "Quantize the built-in synthetic K/V with every preset; print error and bits");
  c->add_option("--heads", p->heads, "KV heads")->check(int_range(1))->capture_default_str();
  c->add_option("--tokens", p->tokens, "tokens T")->check(int_range(1))->capture_default_str();
  c->add_option("--head-dim", p->head_dim, "head dim D")->check(int_range(1))->capture_default_str();
  c->add_option("--seed", p->seed, "generator seed")->capture_default_str();
  c->add_option("--methods", *methods, "methods, comma-separated presets or specs (default: every preset)");
  c->callback([p, methods] {
    std::vector<std::string> names;
    for (const auto& item : *methods)
      for (auto& m : split_method_list(item)) names.push_back(m);
    if (names.empty())  // every preset that works on K and V alone (kvquant needs keys before RoPE)
      for (const auto& pr : presets())
        if (!parse_method(pr.spec)->needs_k_pre_rope()) names.push_back(pr.name);
    // K, V, their reconstructions and one head's copies: about 5 fp32 tensors of this size.
    check_fits_memory(
        checked_product({p->heads, p->tokens, p->head_dim, 5}, "--heads x --tokens x --head-dim"), 4,
        "demo's synthetic K/V");
    std::vector<MethodPtr> resolved;  // every name checked before the work starts
    for (const auto& name : names) {
      resolved.push_back(parse_method(name));
      resolved.back()->check_model({1, p->heads, p->head_dim});
      if (resolved.back()->needs_k_pre_rope())
        throw std::invalid_argument(
            "--methods '" + name +
            "' quantizes keys before RoPE; the demo's K/V have no RoPE: use kvlab eval "
            "on a dump with k_pre_rope (kvlab dump writes it)");
    }
    const auto t0 = std::chrono::steady_clock::now();
    const SyntheticKV kv = synthetic_kv(*p);
    std::printf(
        "Built-in synthetic K/V: %lld heads x %lld tokens x %lld channels (keys with %.1f%% outlier "
        "channels, seed %llu)\n\n",
        (long long)p->heads, (long long)p->tokens, (long long)p->head_dim, 100 * p->outlier_share,
        (unsigned long long)p->seed);
    struct Row {
      std::string name;
      Bits bits;
      Err k, v;
    };
    std::vector<Row> rows;
    for (size_t i = 0; i < names.size(); ++i) {
      const Method& m = *resolved[i];
      // One KV head at a time, as eval applies methods (codebook methods pick tables per head).
      Reconstruction r{kv.k, kv.v};
      const int64_t TD = p->tokens * p->head_dim;
      for (int64_t h = 0; h < p->heads; ++h) {
        const TensorView k{&kv.k.data[h * TD], DType::F32, {1, p->tokens, p->head_dim}};
        const TensorView v{&kv.v.data[h * TD], DType::F32, {1, p->tokens, p->head_dim}};
        const Reconstruction one = m.apply(k, v, {0, h});
        std::copy(one.k.data.begin(), one.k.data.end(), &r.k.data[h * TD]);
        std::copy(one.v.data.begin(), one.v.data.end(), &r.v.data[h * TD]);
      }
      rows.push_back({names[i], m.bits(p->tokens, p->head_dim), error_of(kv.k, r.k), error_of(kv.v, r.v)});
    }
    std::stable_sort(rows.begin(), rows.end(),
                     [](const Row& a, const Row& b) { return a.bits.both() < b.bits.both(); });
    std::vector<std::vector<std::string>> table = {
        {"method", "bits/elem", "K mse", "K max|err|", "K rel err", "V mse", "V max|err|", "V rel err"}};
    for (const auto& r : rows)
      table.push_back({r.name, fixed(r.bits.both(), 3), sci(r.k.mse), sci(r.k.max_abs), sci(r.k.rel),
                       sci(r.v.mse), sci(r.v.max_abs), sci(r.v.rel)});
    print_table(table);
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("\nErrors over all tokens (sink and residual tokens stay fp16, exact here); %.2f s.\n", secs);
  });
}

KVLAB_COMMAND(90, add_demo);

}  // namespace kvlab::cli
