// kvlab info DUMP [--layers a-b] [--role k] [--format table|csv] [--outlier-factor 4]
// What a dump holds (shapes, dtype, attributes) and, per layer and head, the channel statistics
// that decide how keys quantize: mean |k| per channel, the largest channels, max |k|, and the
// outlier channels (mean |k| at least --outlier-factor times the head's median channel).
// Reads one head at a time, so any dump size fits in memory.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <stdexcept>

#include "cli_options.h"
#include "common.h"
#include "kvlab/dump.h"
#include "kvlab/selection.h"

namespace kvlab::cli {
namespace {

struct InfoArgs {
  std::string path, layers, role = "k", format = "table";
  double outlier_factor = 4.0;
  int top = 4;
};

// The first 80 characters of the text on one line (cut on a UTF-8 boundary).
std::string preview(const std::string& text) {
  size_t cut = std::min<size_t>(text.size(), 80);
  while (cut < text.size() && cut > 0 && ((unsigned char)text[cut] & 0xC0) == 0x80) --cut;
  std::string out = "\"";
  for (size_t i = 0; i < cut; ++i) out += text[i] == '\n' ? std::string("\\n") : std::string(1, text[i]);
  return out + (cut < text.size() ? "...\"" : "\"") + " (" + std::to_string(text.size()) + " bytes)";
}

struct HeadStats {
  double mean = 0, median = 0, max = 0;
  int64_t max_channel = 0;
  std::vector<int64_t> by_mean;   // channels, largest mean |x| first
  std::vector<double> channel;    // mean |x| per channel
  std::vector<int64_t> outliers;  // ascending
};

HeadStats head_stats(const Tensor& x, double factor) {
  const int64_t T = x.shape[1], D = x.shape[2];
  HeadStats s;
  s.channel.assign(D, 0.0);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t c = 0; c < D; ++c) {
      const double a = std::fabs(x.data[t * D + c]);
      s.channel[c] += a;
      if (a > s.max) {
        s.max = a;
        s.max_channel = c;
      }
    }
  for (double& m : s.channel) m /= (double)T;
  s.mean = std::accumulate(s.channel.begin(), s.channel.end(), 0.0) / (double)D;
  std::vector<double> sorted = s.channel;
  std::sort(sorted.begin(), sorted.end());
  s.median = D % 2 ? sorted[D / 2] : 0.5 * (sorted[D / 2 - 1] + sorted[D / 2]);
  s.by_mean.resize(D);
  std::iota(s.by_mean.begin(), s.by_mean.end(), 0);
  std::stable_sort(s.by_mean.begin(), s.by_mean.end(),
                   [&](int64_t a, int64_t b) { return s.channel[a] > s.channel[b]; });
  for (int64_t c = 0; c < D; ++c)
    if (s.channel[c] >= factor * s.median && s.channel[c] > 0) s.outliers.push_back(c);
  return s;
}

void print_header(const DumpReader& d) {
  const DumpInfo& in = d.info();
  std::vector<std::string> shapes;
  for (Role r : {Role::Q, Role::K, Role::V, Role::KPreRope})
    if (r != Role::KPreRope || in.has_k_pre_rope)
      shapes.push_back(std::string(to_string(r)) + " " + shape_string(in.shape(r)));
  std::string shape_line;
  for (const auto& s : shapes) shape_line += (shape_line.empty() ? "" : ", ") + s;
  std::printf("dump      %s\n", d.path().c_str());
  std::printf("model     %s\n", in.model.c_str());
  std::printf("shape     %lld layers, %lld q heads, %lld kv heads, head_dim %lld, %lld tokens\n",
              (long long)in.num_layers, (long long)in.num_q_heads, (long long)in.num_kv_heads,
              (long long)in.head_dim, (long long)in.tokens);
  std::printf("per layer %s\n", shape_line.c_str());
  std::printf("dtype     %s (read as float32)\n", to_string(in.dtype));
  std::printf("rope      %s, theta %g; keys stored %s RoPE\n", to_string(in.rope_style), in.rope_theta,
              in.k_after_rope ? "after" : "before");
  std::printf("token ids %s\n",
              in.token_ids.empty() ? "none" : (std::to_string(in.token_ids.size()) + " stored").c_str());
  std::printf("text      %s\n", in.text.empty() ? "none" : preview(in.text).c_str());
  std::printf("source    %s\n", in.source.empty() ? "unknown" : in.source.c_str());
}

// "c c c" or, with values, "c:v c:v"; space-separated so a CSV field needs no quoting.
std::string channel_list(const std::vector<int64_t>& cs, const std::vector<double>* values, size_t n) {
  std::string out;
  for (size_t i = 0; i < std::min(n, cs.size()); ++i) {
    if (i) out += ' ';
    out += std::to_string(cs[i]);
    if (values) out += ":" + fixed((*values)[cs[i]], 2);
  }
  return out;
}

void run(const InfoArgs& a) {
  if (a.format != "table" && a.format != "csv")
    throw std::invalid_argument("--format must be table or csv, got '" + a.format + "'");
  if (!(a.outlier_factor > 0)) throw std::invalid_argument("--outlier-factor must be positive");
  if (a.top < 1) throw std::invalid_argument("--top must be at least 1");
  const auto dump = open_dump(a.path);
  const DumpInfo& in = dump->info();
  const Role role = parse_role(a.role);
  if (role == Role::KPreRope && !in.has_k_pre_rope)
    throw std::invalid_argument("'" + a.path + "' has no k_pre_rope; --role must be q, k or v");
  const auto [first, last] =
      resolve_layers(a.layers.empty() ? LayerRange{} : parse_layers(a.layers), in.num_layers);
  const bool csv = a.format == "csv";
  const std::string r = to_string(role);
  std::vector<std::vector<std::string>> rows = {{"layer", "head", "mean|" + r + "|", "median ch",
                                                 "max|" + r + "|", "max ch", "top channels (mean|" + r + "|)",
                                                 "outliers", "outlier channels"}};
  if (csv)
    rows[0] = {"layer",       "head",         "mean_abs",     "median_channel_mean_abs", "max_abs",
               "max_channel", "top_channels", "num_outliers", "outlier_channels"};
  if (!csv) {
    print_header(*dump);
    std::printf(
        "\nchannel statistics of %s (outliers: channel mean |%s| >= %g x the head's median channel)\n\n",
        r.c_str(), r.c_str(), a.outlier_factor);
  }
  for (int64_t l = first; l <= last; ++l)
    for (int64_t h = 0; h < in.heads(role); ++h) {
      const HeadStats s = head_stats(dump->read_head(l, role, h), a.outlier_factor);
      rows.push_back({std::to_string(l), std::to_string(h), fixed(s.mean, 3), fixed(s.median, 3),
                      fixed(s.max, 3), std::to_string(s.max_channel),
                      channel_list(s.by_mean, &s.channel, a.top), std::to_string(s.outliers.size()),
                      channel_list(s.outliers, nullptr, s.outliers.size())});
    }
  if (csv) {
    for (const auto& row : rows) {
      std::string line;
      for (size_t i = 0; i < row.size(); ++i) line += (i ? "," : "") + row[i];
      std::printf("%s\n", line.c_str());
    }
  } else {
    print_table(rows);
  }
}

}  // namespace

static void add_info(CLI::App& app) {
  auto a = std::make_shared<InfoArgs>();
  auto* c = app.add_subcommand("info",
                               "Show a dump's shapes, dtype and attributes, and its key channel statistics");
  add_dump_arg(c, a->path, "dump file or directory (any format open_dump reads)")->required();
  add_layers_option(c, a->layers, "layer 'a' or range 'a-b' (default: all)");
  c->add_option("--role", a->role, "tensor to analyse: k, k_pre_rope, q or v")->capture_default_str();
  c->add_option("--outlier-factor", a->outlier_factor,
                "outlier: channel mean |x| >= this x the median channel")
      ->check(real_range(0, std::numeric_limits<double>::max(), true))
      ->capture_default_str();
  c->add_option("--top", a->top, "largest channels listed per head")
      ->check(int_range(1))
      ->capture_default_str();
  add_format_option(c, a->format, "table (with the attributes) or csv (statistics only)");
  c->callback([a] { run(*a); });
}

KVLAB_COMMAND(24, add_info);

}  // namespace kvlab::cli
