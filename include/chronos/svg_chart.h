// A minimal SVG chart for benchmark reports: bar panels and a scatter panel (no dependencies,
// deterministic output).
#pragma once

#include <string>
#include <vector>

namespace chronos {

struct BarSeries {
  std::string title;  // panel title, e.g. "decode tokens/s"
  std::vector<double> values;
};

// One point of a scatter panel: a configuration's speed and quality, colored by its group.
struct ScatterPoint {
  std::string label;  // written next to the point
  std::string group;  // one color and one legend entry per group (a budget, say)
  double x = 0, y = 0;
};

struct ScatterPanel {
  std::string title, x_title, y_title;
  std::vector<ScatterPoint> points;  // none: no panel
};

// One horizontal panel per series, one bar per label, values printed next to the bars; then, if
// `scatter` has points, a scatter panel (x from 0, y over the points' range).
std::string svg_bar_chart(const std::string& title, const std::vector<std::string>& labels,
                          const std::vector<BarSeries>& series, const ScatterPanel& scatter = {});

}  // namespace chronos
