// SVG by hand: fixed layouts, viridis-like colours, decade ticks on log axes.
#include "kvlab/svg_plot.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <stdexcept>

namespace kvlab {
namespace {

std::string esc(const std::string& s) {
  std::string o;
  for (char c : s) {
    if (c == '<')
      o += "&lt;";
    else if (c == '>')
      o += "&gt;";
    else if (c == '&')
      o += "&amp;";
    else
      o += c;
  }
  return o;
}

std::string num(double v) {
  char b[32];
  std::snprintf(b, sizeof b, "%.2f", v);
  return b;
}

std::string text(double x, double y, const std::string& s, const char* anchor = "middle", int size = 12,
                 const std::string& extra = "") {
  return "<text x=\"" + num(x) + "\" y=\"" + num(y) + "\" font-size=\"" + std::to_string(size) +
         "\" text-anchor=\"" + anchor + "\" font-family=\"sans-serif\"" + extra + ">" + esc(s) + "</text>\n";
}

// Viridis, approximated by 5 stops, t in [0, 1].
std::string colour(double t) {
  static const std::array<std::array<double, 3>, 5> stop{
      {{68, 1, 84}, {59, 82, 139}, {33, 145, 140}, {94, 201, 98}, {253, 231, 37}}};
  t = std::clamp(t, 0.0, 1.0) * 4.0;
  const int i = std::min(3, (int)t);
  const double f = t - i;
  char b[8];
  std::snprintf(b, sizeof b, "#%02x%02x%02x",
                (int)std::lround(stop[i][0] + f * (stop[i + 1][0] - stop[i][0])),
                (int)std::lround(stop[i][1] + f * (stop[i + 1][1] - stop[i][1])),
                (int)std::lround(stop[i][2] + f * (stop[i + 1][2] - stop[i][2])));
  return b;
}

std::string exp_label(double e) {  // 10^e for integer e
  return "1e" + std::to_string((int)std::lround(e));
}

const std::array<const char*, 6> kLineColours{"#1f77b4", "#d62728", "#2ca02c",
                                              "#9467bd", "#ff7f0e", "#8c564b"};

}  // namespace

std::string heatmap_svg(const Heatmap& h) {
  const int64_t rows = (int64_t)h.row_labels.size();
  if (rows == 0 || h.cols <= 0 || (int64_t)h.values.size() != rows * h.cols)
    throw std::invalid_argument("heatmap_svg: " + std::to_string(h.values.size()) + " values for " +
                                std::to_string(rows) + " rows x " + std::to_string(h.cols) + " columns");
  const double cw = std::clamp(720.0 / h.cols, 3.0, 40.0), ch = std::clamp(600.0 / rows, 2.0, 24.0);
  const double left = 90, top = 50, W = left + cw * h.cols + 140, H = top + ch * rows + 60;
  double lo = INFINITY, hi = -INFINITY;
  auto val = [&](double v) { return h.log10_values ? (v > 0 ? std::log10(v) : NAN) : v; };
  for (double v : h.values)
    if (std::isfinite(val(v))) {
      lo = std::min(lo, val(v));
      hi = std::max(hi, val(v));
    }
  if (!std::isfinite(lo)) {
    lo = 0;
    hi = 1;
  }
  if (hi == lo) hi = lo + 1;
  std::string s = "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + num(W) + "\" height=\"" + num(H) +
                  "\" viewBox=\"0 0 " + num(W) + " " + num(H) +
                  "\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  s += text(W / 2, 22, h.title, "middle", 15);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < h.cols; ++c) {
      const double v = val(h.values[r * h.cols + c]);
      s += "<rect x=\"" + num(left + c * cw) + "\" y=\"" + num(top + r * ch) + "\" width=\"" + num(cw + 0.3) +
           "\" height=\"" + num(ch + 0.3) + "\" fill=\"" +
           colour(std::isfinite(v) ? (v - lo) / (hi - lo) : 0) + "\"/>\n";
    }
  const int64_t rstep = std::max<int64_t>(1, (int64_t)std::ceil(11.0 / ch));  // labels 11 px apart at least
  for (int64_t r = 0; r < rows; r += rstep)
    s += text(left - 4, top + (r + 0.5) * ch + 4, h.row_labels[r], "end", 10);
  const int64_t cstep = std::max<int64_t>(1, (int64_t)std::ceil(24.0 / cw));
  for (int64_t c = 0; c < h.cols; c += cstep)
    s += text(left + (c + 0.5) * cw, top + rows * ch + 14, std::to_string(c), "middle", 10);
  s += text(left + cw * h.cols / 2, top + rows * ch + 34, h.x_label);
  s += text(16, top + rows * ch / 2, h.y_label, "middle", 12,
            " transform=\"rotate(-90 16 " + num(top + rows * ch / 2) + ")\"");
  // colour bar
  const double bx = left + cw * h.cols + 30, bh = std::min(300.0, rows * ch);
  for (int i = 0; i < 50; ++i)
    s += "<rect x=\"" + num(bx) + "\" y=\"" + num(top + bh * (1 - (i + 1) / 50.0)) +
         "\" width=\"16\" height=\"" + num(bh / 50 + 0.3) + "\" fill=\"" + colour((i + 0.5) / 50) + "\"/>\n";
  auto label = [&](double v) {
    char b[32];
    std::snprintf(b, sizeof b, h.log10_values ? "%.1e" : "%.3g", h.log10_values ? std::pow(10.0, v) : v);
    return std::string(b);
  };
  s += text(bx + 20, top + bh + 4, label(lo), "start", 10) + text(bx + 20, top + 8, label(hi), "start", 10);
  s += text(bx + 8, top + bh + 22, h.value_label, "middle", 10);
  return s + "</svg>\n";
}

std::string line_chart_svg(const LineChart& c) {
  const int64_t n = (int64_t)c.x_ticks.size();
  if (n == 0) throw std::invalid_argument("line_chart_svg: no x positions");
  const double left = 80, top = 45, pw = 560, ph = 340, W = left + pw + 230, H = top + ph + 60;
  auto tr = [&](double v) { return c.log_y ? (v > 0 ? std::log10(v) : NAN) : v; };
  double lo = INFINITY, hi = -INFINITY;
  for (const Series& s : c.series) {
    if ((int64_t)s.y.size() != n)
      throw std::invalid_argument("line_chart_svg: series " + s.name + " has the wrong length");
    for (const auto* v : {&s.y, &s.lo, &s.hi})
      for (double y : *v)
        if (std::isfinite(tr(y))) {
          lo = std::min(lo, tr(y));
          hi = std::max(hi, tr(y));
        }
  }
  if (!std::isfinite(lo)) {
    lo = 0;
    hi = 1;
  }
  if (c.log_y) {
    lo = std::floor(lo);
    hi = std::ceil(hi);
  }
  if (hi == lo) hi = lo + 1;
  auto X = [&](int64_t i) { return left + (n == 1 ? pw / 2 : pw * i / (double)(n - 1)); };
  auto Y = [&](double v) { return top + ph * (1 - (tr(v) - lo) / (hi - lo)); };
  std::string s = "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + num(W) + "\" height=\"" + num(H) +
                  "\" viewBox=\"0 0 " + num(W) + " " + num(H) +
                  "\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  s += text(left + pw / 2, 22, c.title, "middle", 15);
  s += "<rect x=\"" + num(left) + "\" y=\"" + num(top) + "\" width=\"" + num(pw) + "\" height=\"" + num(ph) +
       "\" fill=\"none\" stroke=\"black\"/>\n";
  const int yt = c.log_y ? (int)(hi - lo) : 5;
  for (int i = 0; i <= yt; ++i) {  // y ticks: decades on a log axis
    const double v = lo + (hi - lo) * i / yt, y = top + ph * (1 - (double)i / yt);
    s += "<line x1=\"" + num(left) + "\" x2=\"" + num(left + pw) + "\" y1=\"" + num(y) + "\" y2=\"" + num(y) +
         "\" stroke=\"#ddd\"/>\n";
    char b[32];
    std::snprintf(b, sizeof b, "%.3g", v);
    s += text(left - 6, y + 4, c.log_y ? exp_label(v) : std::string(b), "end", 11);
  }
  for (int64_t i = 0; i < n; ++i) s += text(X(i), top + ph + 16, c.x_ticks[i], "middle", 11);
  s += text(left + pw / 2, top + ph + 40, c.x_label);
  s += text(18, top + ph / 2, c.y_label, "middle", 12,
            " transform=\"rotate(-90 18 " + num(top + ph / 2) + ")\"");
  for (size_t k = 0; k < c.series.size(); ++k) {
    const Series& sr = c.series[k];
    const std::string col = kLineColours[k % kLineColours.size()];
    std::string path;
    for (int64_t i = 0; i < n; ++i) {
      if (!std::isfinite(tr(sr.y[i]))) continue;
      path += (path.empty() ? "M" : " L") + num(X(i)) + "," + num(Y(sr.y[i]));
      s += "<circle cx=\"" + num(X(i)) + "\" cy=\"" + num(Y(sr.y[i])) + "\" r=\"3\" fill=\"" + col + "\"/>\n";
      if ((int64_t)sr.lo.size() == n && (int64_t)sr.hi.size() == n && std::isfinite(tr(sr.lo[i])) &&
          std::isfinite(tr(sr.hi[i])))
        s += "<line x1=\"" + num(X(i)) + "\" x2=\"" + num(X(i)) + "\" y1=\"" + num(Y(sr.lo[i])) + "\" y2=\"" +
             num(Y(sr.hi[i])) + "\" stroke=\"" + col + "\" stroke-width=\"2\"/>\n";
    }
    s += "<path d=\"" + path + "\" fill=\"none\" stroke=\"" + col + "\" stroke-width=\"1.5\"/>\n";
    const double ly = top + 10 + 18 * k;
    s += "<line x1=\"" + num(left + pw + 15) + "\" x2=\"" + num(left + pw + 35) + "\" y1=\"" + num(ly) +
         "\" y2=\"" + num(ly) + "\" stroke=\"" + col + "\" stroke-width=\"2\"/>\n";
    s += text(left + pw + 40, ly + 4, sr.name, "start", 11);
  }
  return s + "</svg>\n";
}

}  // namespace kvlab
