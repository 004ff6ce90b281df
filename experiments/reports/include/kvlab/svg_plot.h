// Hand-written SVG charts, so the studies' pictures need no Python: a heatmap with a colour bar
// and a line chart with axes, ticks, labels and optional min-max bars.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace kvlab {

struct Heatmap {
  std::string title, x_label, y_label, value_label;
  std::vector<std::string> row_labels;  // one per row
  int64_t cols = 0;
  std::vector<double> values;  // rows x cols, row-major
  bool log10_values = true;    // colour by log10(value); values <= 0 take the lowest colour
};
std::string heatmap_svg(const Heatmap& h);

struct Series {
  std::string name;
  std::vector<double> y;       // one per x position
  std::vector<double> lo, hi;  // optional bars (e.g. min and max over seeds)
};

struct LineChart {
  std::string title, x_label, y_label;
  std::vector<std::string> x_ticks;  // categorical x positions, evenly spaced, these labels
  bool log_y = true;                 // log10 axis; values <= 0 are not drawn
  std::vector<Series> series;
};
std::string line_chart_svg(const LineChart& c);

}  // namespace kvlab
