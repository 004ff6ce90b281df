// Options that several kvlab subcommands share, declared once: the same name, help text and
// default display wherever they appear. Each adds one option where it is called, so a command's
// --help keeps its own order.
#pragma once
#include <CLI/CLI.hpp>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "kvlab/enum_names.h"
#include "kvlab/kv_text.h"
#include "kvlab/threads.h"

namespace kvlab::cli {

// The names of enum E in its table's order for a help text: enum_list<E>(", ", " or ") gives
// "a, b or c".
template <class E>
std::string enum_list(const std::string& sep, const std::string& last_sep) {
  std::string out;
  const size_t n = std::size(EnumNames<E>::names);
  for (size_t i = 0; i < n; ++i)
    out += (i == 0 ? "" : i + 1 == n ? last_sep : sep) + EnumNames<E>::names[i].name;
  return out;
}

// Numeric options take a whole number in [lo, hi]; anything else fails at parse time with the
// option named ("--head-dim: 0 is outside 1 to 1048576"), before any work or allocation.
inline CLI::Validator int_range(int64_t lo, int64_t hi = std::numeric_limits<int64_t>::max()) {
  return CLI::Validator(
      [lo, hi](std::string& s) -> std::string {
        int64_t v = 0;
        const auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
        if (ec != std::errc() || p != s.data() + s.size()) return "'" + s + "' is not a whole number";
        if (v < lo || v > hi)
          return s + " is outside " + std::to_string(lo) + " to " +
                 (hi == std::numeric_limits<int64_t>::max() ? "2^63-1" : std::to_string(hi));
        return "";
      },
      "");
}

// A finite real in [lo, hi], or in (lo, hi] with lo_open; NaN and infinities are refused.
inline CLI::Validator real_range(double lo, double hi, bool lo_open = false) {
  return CLI::Validator(
      [lo, hi, lo_open](std::string& s) -> std::string {
        double v = 0;
        const auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
        if (ec != std::errc() || p != s.data() + s.size() || !std::isfinite(v))
          return "'" + s + "' is not a finite number";
        if (v < lo || v > hi || (lo_open && v == lo))
          return s + " is outside " + (lo_open ? "(" : "[") + text::format_double(lo) + ", " +
                 text::format_double(hi) + "]";
        return "";
      },
      "");
}

// Help texts of the shared options; a command whose option means something narrower passes its own.
inline constexpr const char* kDumpSourceHelp =
    "dump file (default: the built-in dump); or synthetic:PRESET[:tokens=N,layers=N,seed=N]";
inline constexpr const char* kLayersHelp = "layers a-b (inclusive) or a; default all";
inline constexpr const char* kQueriesHelp = "query positions: all, last:N or stride:N";
inline constexpr const char* kThreadsHelp = "OpenMP threads (0: OMP_NUM_THREADS or all cores)";

// The DUMP positional: a path or a synthetic:PRESET source (dump_source.h).
inline CLI::Option* add_dump_arg(CLI::App* c, std::string& dump, const std::string& help = kDumpSourceHelp) {
  return c->add_option("dump", dump, help);
}

// --layers a-b or a (selection.h's parse_layers).
inline CLI::Option* add_layers_option(CLI::App* c, std::string& layers,
                                      const std::string& help = kLayersHelp) {
  return c->add_option("--layers", layers, help);
}

// --queries all|last:N|stride:N (selection.h's parse_queries), default shown.
inline CLI::Option* add_queries_option(CLI::App* c, std::string& queries,
                                       const std::string& help = kQueriesHelp) {
  return c->add_option("--queries", queries, help)->capture_default_str();
}

// --threads N (0: the OpenMP default; threads.h's resolve_threads), default shown; more than
// max_threads() is refused here (libgomp crashes on ~100000).
inline CLI::Option* add_threads_option(CLI::App* c, int& threads, const std::string& help = kThreadsHelp) {
  const CLI::Validator bound(
      [](std::string& s) -> std::string {
        int v = 0;
        const auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
        if (ec != std::errc() || p != s.data() + s.size()) return "'" + s + "' is not a whole number";
        return threads_error(v);
      },
      "");
  return c->add_option("--threads", threads, help)->check(bound)->capture_default_str();
}

// --format NAME, default shown; with choices, anything else is refused by the parser.
inline CLI::Option* add_format_option(CLI::App* c, std::string& format, const std::string& help,
                                      const std::vector<std::string>& choices = {}) {
  auto* o = c->add_option("--format", format, help);
  if (!choices.empty()) o->check(CLI::IsMember(choices));
  return o->capture_default_str();
}

// --out PATH; the caller adds ->required() where there is no default.
inline CLI::Option* add_out_option(CLI::App* c, std::string& out, const std::string& help) {
  return c->add_option("--out", out, help);
}

// --quiet: no progress lines on stderr.
inline CLI::Option* add_quiet_flag(CLI::App* c, bool& quiet) {
  return c->add_flag("--quiet", quiet, "no progress on stderr");
}

}  // namespace kvlab::cli
