// The hand-written SVG charts: one cell per value, labels present, bad shapes refused.
#include <gtest/gtest.h>

#include <string>

#include "kvlab/svg_plot.h"

namespace {

using namespace kvlab;

int count(const std::string& s, const std::string& what) {
  int n = 0;
  for (size_t p = s.find(what); p != std::string::npos; p = s.find(what, p + 1)) ++n;
  return n;
}

TEST(SvgPlot, HeatmapHasACellPerValueAndItsLabels) {
  Heatmap h;
  h.title = "T & <x>";
  h.x_label = "channel";
  h.y_label = "layer, head";
  h.value_label = "MSE";
  h.row_labels = {"L0 H0", "L0 H1"};
  h.cols = 3;
  h.values = {1e-6, 1e-4, 0.0, 2e-5, 3e-5, 1e-3};  // a zero takes the lowest colour
  const std::string s = heatmap_svg(h);
  EXPECT_EQ(s.rfind("<svg", 0), 0u);
  EXPECT_NE(s.find("</svg>"), std::string::npos);
  EXPECT_EQ(count(s, "<rect x="), 6 + 50);                    // cells + colour bar steps
  EXPECT_NE(s.find("T &amp; &lt;x&gt;"), std::string::npos);  // escaped title
  EXPECT_NE(s.find("L0 H1"), std::string::npos);
  EXPECT_NE(s.find("1.0e-03"), std::string::npos);  // colour bar top = the largest value
  EXPECT_NE(s.find("1.0e-06"), std::string::npos);  // bottom = the smallest positive one
  h.values.pop_back();
  EXPECT_THROW(heatmap_svg(h), std::invalid_argument);
}

TEST(SvgPlot, LineChartDrawsSeriesBarsAndDecadeTicks) {
  LineChart c;
  c.title = "sweep";
  c.x_label = "rate";
  c.y_label = "MSE";
  c.x_ticks = {"0", "0.5", "1"};
  c.series = {{"magnitude", {1e-3, 1e-4, 1e-5}, {}, {}},
              {"random", {1e-3, 5e-4, 1e-5}, {1e-3, 4e-4, 1e-5}, {1e-3, 6e-4, 1e-5}}};
  const std::string s = line_chart_svg(c);
  EXPECT_EQ(count(s, "<path d=\"M"), 2);
  EXPECT_EQ(count(s, "<circle"), 6);
  EXPECT_NE(s.find(">1e-3<"), std::string::npos);
  EXPECT_NE(s.find(">1e-5<"), std::string::npos);
  EXPECT_NE(s.find(">random<"), std::string::npos);
  c.series[0].y.pop_back();
  EXPECT_THROW(line_chart_svg(c), std::invalid_argument);
  c.x_ticks.clear();
  EXPECT_THROW(line_chart_svg(c), std::invalid_argument);
}

}  // namespace
