// kvlab methods: the KV-method presets, their canonical specs and bits per element.
#include <cstdio>

#include "common.h"
#include "kvlab/method.h"

namespace kvlab::cli {

static void add_methods(CLI::App& app) {
  auto tokens = std::make_shared<int64_t>(4096);
  auto dim = std::make_shared<int64_t>(128);
  auto* c = app.add_subcommand("methods", "List the KV-method presets and their parameters");
  c->add_option("--tokens", *tokens, "T used for bits per element")->capture_default_str();
  c->add_option("--head-dim", *dim, "D used for bits per element")->capture_default_str();
  c->callback([tokens, dim] {
    std::vector<std::vector<std::string>> rows = {{"preset", "bits K", "bits V", "bits KV", "description"}};
    for (const auto& p : presets()) {
      const Bits b = bits_per_element(parse_method(p.name), *tokens, *dim);
      rows.push_back({p.name, fixed(b.key, 3), fixed(b.value, 3), fixed(b.both(), 3), p.description});
    }
    std::printf("Bits per element at T=%lld, D=%lld (codes, scales, zeros, boost planes, fp16 tokens)\n\n",
                (long long)*tokens, (long long)*dim);
    print_table(rows);
    std::printf("\nCanonical specs (a spec is a preset name or family:key=value,...):\n");
    for (const auto& p : presets()) std::printf("  %-12s %s\n", p.name.c_str(), p.spec.c_str());
    std::printf(
        "\nKeys:\n"
        "  kbits, vbits  code bits of keys / values (1..8)\n"
        "  group         keys: tokens per group, per channel (kitty: page size); int8: tokens per scale or "
        "'all'\n"
        "  vgroup        values: channels per group, per token ('all' = head dim)\n"
        "  sink          the first S tokens stay fp16\n"
        "  residual      the newest R values stay fp16; keys past the last whole group stay fp16\n"
        "  boost         kitty: share of key channels per page at kbits+2, chosen by mean |k|\n"
        "  params        fp16|fp32 storage of scales and zeros\n"
        "  profile       kvlab|kivi|kitty-sim arithmetic (docs/FORMATS.md)\n");
  });
}

KVLAB_COMMAND(80, add_methods);

}  // namespace kvlab::cli
