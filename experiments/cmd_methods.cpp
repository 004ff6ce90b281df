// kvlab methods: every registered method family with its keys, every preset with its canonical
// spec and bits per element.
#include <cstdio>

#include "cli_options.h"
#include "common.h"
#include "kvlab/method.h"
#include "kvlab/sizes.h"

namespace kvlab::cli {

static void add_methods(CLI::App& app) {
  auto tokens = std::make_shared<int64_t>(4096);
  auto dim = std::make_shared<int64_t>(128);
  auto* c = app.add_subcommand("methods", "List the KV-method families, their keys and presets");
  c->add_option("--tokens", *tokens, "T used for bits per element")
      ->check(int_range(1))
      ->capture_default_str();
  c->add_option("--head-dim", *dim, "D used for bits per element")
      ->check(int_range(1))
      ->capture_default_str();
  c->callback([tokens, dim] {
    checked_product({*tokens, *dim, 16}, "--tokens x --head-dim x 16 bits");  // the bit counts below
    std::vector<std::vector<std::string>> rows = {{"preset", "bits K", "bits V", "bits KV", "description"}};
    for (const auto& p : presets()) {
      const Bits b = parse_method(p.name)->bits(*tokens, *dim);
      rows.push_back({p.name, fixed(b.key, 3), fixed(b.value, 3), fixed(b.both(), 3), p.description});
    }
    std::printf("Bits per element at T=%lld, D=%lld (codes, scales, zeros, boost planes, fp16 tokens)\n\n",
                (long long)*tokens, (long long)*dim);
    print_table(rows);
    std::printf("\nCanonical specs (a spec is a preset name or family:key=value,...):\n");
    for (const auto& p : presets()) std::printf("  %-12s %s\n", p.name.c_str(), p.spec.c_str());
    std::printf("\nFamilies and their keys (defaults in brackets):\n");
    for (const MethodFamily* f : method_families()) {
      std::printf("  %-8s %s\n", f->name.c_str(), f->summary.c_str());
      for (const MethodKey& k : f->keys)
        std::printf("    %-10s %-8s %s\n", k.name.c_str(), ("[" + k.default_value + "]").c_str(),
                    k.meaning.c_str());
    }
  });
}

KVLAB_COMMAND(80, add_methods);

}  // namespace kvlab::cli
