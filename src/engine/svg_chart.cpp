// svg_bar_chart: panels of horizontal bars, one per configuration.
#include "chronos/svg_chart.h"

#include <fmt/format.h>

#include <algorithm>

namespace chronos {
namespace {

std::string escape(const std::string& text) {
  std::string out;
  for (char c : text) {
    if (c == '<') out += "&lt;";
    else if (c == '>') out += "&gt;";
    else if (c == '&') out += "&amp;";
    else out += c;
  }
  return out;
}

}  // namespace

std::string svg_bar_chart(const std::string& title, const std::vector<std::string>& labels,
                          const std::vector<BarSeries>& series) {
  const int label_width = 260, bar_width = 360, row = 22, panel_gap = 40, top = 40;
  const int panel_height = int(labels.size()) * row + 30;
  const int width = label_width + bar_width + 120;
  const int height = top + int(series.size()) * (panel_height + panel_gap);
  std::string svg = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{}\" font-family=\"sans-serif\" "
      "font-size=\"12\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
      "<text x=\"10\" y=\"22\" font-size=\"15\" font-weight=\"bold\">{}</text>\n",
      width, height, escape(title));
  const char* colors[] = {"#3b6ea8", "#c8553d", "#5a9367", "#8d6cab"};
  for (size_t p = 0; p < series.size(); ++p) {
    const int y0 = top + int(p) * (panel_height + panel_gap);
    svg += fmt::format("<text x=\"10\" y=\"{}\" font-weight=\"bold\">{}</text>\n", y0 + 14, escape(series[p].title));
    double max_value = 0;
    for (double v : series[p].values) max_value = std::max(max_value, v);
    if (max_value <= 0) max_value = 1;
    for (size_t i = 0; i < labels.size(); ++i) {
      const double v = i < series[p].values.size() ? series[p].values[i] : 0.0;
      const int y = y0 + 24 + int(i) * row;
      const int w = int(bar_width * std::max(0.0, v) / max_value);
      svg += fmt::format("<text x=\"10\" y=\"{}\">{}</text>\n", y + 13, escape(labels[i]));
      svg += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"{}\"/>\n", label_width, y, w, row - 6,
                         colors[p % 4]);
      svg += fmt::format("<text x=\"{}\" y=\"{}\">{:.4g}</text>\n", label_width + w + 6, y + 13, v);
    }
  }
  svg += "</svg>\n";
  return svg;
}

}  // namespace chronos
