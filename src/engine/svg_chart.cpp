// svg_bar_chart: panels of horizontal bars, one per configuration.
#include "chronos/svg_chart.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace chronos {
namespace {

std::string escape(const std::string& text) {
  std::string out;
  for (char c : text) {
    if (c == '<')
      out += "&lt;";
    else if (c == '>')
      out += "&gt;";
    else if (c == '&')
      out += "&amp;";
    else
      out += c;
  }
  return out;
}

}  // namespace

std::string svg_bar_chart(const std::string& title, const std::vector<std::string>& labels,
                          const std::vector<BarSeries>& series, const ScatterPanel& scatter) {
  const int label_width = 260, bar_width = 360, row = 22, panel_gap = 40, top = 40;
  const int panel_height = int(labels.size()) * row + 30;
  const int width = label_width + bar_width + 120;
  const int plot_left = 70, plot_width = width - plot_left - 110, plot_height = 300;  // room for labels
  const int scatter_height = scatter.points.empty() ? 0 : plot_height + 110;
  const int height = top + int(series.size()) * (panel_height + panel_gap) + scatter_height;
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
      svg += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"{}\"/>\n", label_width, y, w,
                         row - 6, colors[p % 4]);
      svg += fmt::format("<text x=\"{}\" y=\"{}\">{:.4g}</text>\n", label_width + w + 6, y + 13, v);
    }
  }
  if (!scatter.points.empty()) {
    const int y0 = top + int(series.size()) * (panel_height + panel_gap);
    const int plot_top = y0 + 30;
    svg += fmt::format("<text x=\"10\" y=\"{}\" font-weight=\"bold\">{}</text>\n", y0 + 14, escape(scatter.title));
    double x_max = 0, y_min = scatter.points.front().y, y_max = y_min;
    for (const ScatterPoint& p : scatter.points) {
      x_max = std::max(x_max, p.x);
      y_min = std::min(y_min, p.y);
      y_max = std::max(y_max, p.y);
    }
    if (x_max <= 0) x_max = 1;
    x_max *= 1.05;
    const double y_pad = y_max > y_min ? 0.05 * (y_max - y_min) : std::max(1.0, 0.05 * std::fabs(y_max));
    y_min -= y_pad;
    y_max += y_pad;
    const auto px = [&](double x) { return plot_left + int(double(plot_width) * std::max(0.0, x) / x_max); };
    const auto py = [&](double y) {
      return plot_top + plot_height - int(double(plot_height) * (y - y_min) / (y_max - y_min));
    };
    svg += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"none\" stroke=\"#888\"/>\n",
                       plot_left, plot_top, plot_width, plot_height);
    for (int tick = 0; tick <= 4; ++tick) {
      const double x = x_max * tick / 4, y = y_min + (y_max - y_min) * tick / 4;
      svg += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">{:.3g}</text>\n", px(x),
                         plot_top + plot_height + 16, x);
      svg += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"end\">{:.4g}</text>\n", plot_left - 6, py(y) + 4, y);
    }
    svg += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">{}</text>\n", plot_left + plot_width / 2,
                       plot_top + plot_height + 34, escape(scatter.x_title));
    svg += fmt::format("<text x=\"14\" y=\"{}\" transform=\"rotate(-90 14 {})\" text-anchor=\"middle\">{}</text>\n",
                       plot_top + plot_height / 2, plot_top + plot_height / 2, escape(scatter.y_title));
    std::vector<std::string> groups;  // in order of first appearance
    for (const ScatterPoint& p : scatter.points)
      if (std::find(groups.begin(), groups.end(), p.group) == groups.end()) groups.push_back(p.group);
    for (const ScatterPoint& p : scatter.points) {
      const size_t g = size_t(std::find(groups.begin(), groups.end(), p.group) - groups.begin());
      svg += fmt::format("<circle cx=\"{}\" cy=\"{}\" r=\"5\" fill=\"{}\"><title>{}</title></circle>\n", px(p.x),
                         py(p.y), colors[g % 4], escape(p.label));
      svg += fmt::format("<text x=\"{}\" y=\"{}\" font-size=\"10\">{}</text>\n", px(p.x) + 7, py(p.y) - 5,
                         escape(p.label));
    }
    for (size_t g = 0; g < groups.size(); ++g) {
      const int y = plot_top + plot_height + 52 + int(g / 3) * 16;
      const int x = plot_left + int(g % 3) * 200;
      svg += fmt::format("<circle cx=\"{}\" cy=\"{}\" r=\"5\" fill=\"{}\"/>\n<text x=\"{}\" y=\"{}\">{}</text>\n", x,
                         y - 4, colors[g % 4], x + 10, y, escape(groups[g]));
    }
  }
  svg += "</svg>\n";
  return svg;
}

}  // namespace chronos
