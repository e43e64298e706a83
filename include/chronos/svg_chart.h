// A minimal SVG bar chart for benchmark reports (no dependencies, deterministic output).
#pragma once

#include <string>
#include <vector>

namespace chronos {

struct BarSeries {
  std::string title;  // panel title, e.g. "decode tokens/s"
  std::vector<double> values;
};

// One horizontal panel per series, one bar per label, values printed next to the bars.
std::string svg_bar_chart(const std::string& title, const std::vector<std::string>& labels,
                          const std::vector<BarSeries>& series);

}  // namespace chronos
