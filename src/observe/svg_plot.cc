// SVG line charts (see svg_plot.h).
#include "observe/svg_plot.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace rt::observe {
namespace {

constexpr const char* kPalette[] = {"#1f77b4", "#d62728", "#2ca02c", "#9467bd",
                                    "#ff7f0e", "#8c564b", "#e377c2", "#17becf"};

std::string Escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        out.push_back(c);
    }
  }
  return out;
}

std::string TickLabel(double v, double step) {
  if (v == 0) return "0";
  const double a = std::fabs(v);
  if (a >= 1e6 || a < 1e-3) return absl::StrFormat("%.3g", v);
  const int decimals = step >= 1 ? 0 : static_cast<int>(std::ceil(-std::log10(step)));
  return absl::StrFormat("%.*f", decimals, v);
}

}  // namespace

std::vector<double> NiceTicks(double lo, double hi, int target) {
  std::vector<double> ticks;
  if (!(hi > lo) || !std::isfinite(lo) || !std::isfinite(hi)) return {lo};
  const double raw = (hi - lo) / std::max(1, target);
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  double step = mag;
  for (double m : {1.0, 2.0, 5.0, 10.0}) {
    step = m * mag;
    if (step >= raw) break;
  }
  for (double t = std::ceil(lo / step) * step; t <= hi + step * 1e-9; t += step) {
    ticks.push_back(std::fabs(t) < step * 1e-9 ? 0 : t);
    if (ticks.size() > 100) break;
  }
  return ticks;
}

std::string RenderSvgPlot(const std::vector<PlotPanel>& panels, const std::string& x_label,
                          int width, int panel_height) {
  const int left = 70, right = 20, top = 34, bottom = 46;
  const int height = static_cast<int>(panels.size()) * panel_height;
  std::string svg = absl::StrFormat(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" "
      "font-family=\"sans-serif\" font-size=\"12\">\n<rect width=\"100%%\" height=\"100%%\" "
      "fill=\"white\"/>\n",
      width, height, width, height);
  for (size_t k = 0; k < panels.size(); ++k) {
    const PlotPanel& p = panels[k];
    const int y_off = static_cast<int>(k) * panel_height;
    double x0 = INFINITY, x1 = -INFINITY, y0 = INFINITY, y1 = -INFINITY;
    for (const PlotSeries& s : p.series) {
      for (size_t i = 0; i < s.x.size() && i < s.y.size(); ++i) {
        if (!std::isfinite(s.x[i]) || !std::isfinite(s.y[i])) continue;
        x0 = std::min(x0, s.x[i]);
        x1 = std::max(x1, s.x[i]);
        y0 = std::min(y0, s.y[i]);
        y1 = std::max(y1, s.y[i]);
      }
    }
    absl::StrAppendFormat(
        &svg, "<text x=\"%d\" y=\"%d\" font-size=\"15\" font-weight=\"bold\">%s</text>\n", left,
        y_off + 20, Escape(p.title));
    const double pw = width - left - right, ph = panel_height - top - bottom;
    if (!std::isfinite(x0)) {
      absl::StrAppendFormat(&svg, "<text x=\"%d\" y=\"%d\" fill=\"#777\">no data</text>\n",
                            left + 10, y_off + top + 30);
      continue;
    }
    if (x1 == x0) x1 = x0 + 1;
    if (y1 == y0) {
      y1 = y0 + std::max(1e-9, std::fabs(y0) * 0.05);
      y0 -= std::max(1e-9, std::fabs(y0) * 0.05);
    }
    const double pad = (y1 - y0) * 0.04;
    y0 -= pad;
    y1 += pad;
    auto px = [&](double x) { return left + (x - x0) / (x1 - x0) * pw; };
    auto py = [&](double y) { return y_off + top + (1 - (y - y0) / (y1 - y0)) * ph; };
    const std::vector<double> yt = NiceTicks(y0, y1, 6), xt = NiceTicks(x0, x1, 8);
    const double ystep = yt.size() > 1 ? yt[1] - yt[0] : 1,
                 xstep = xt.size() > 1 ? xt[1] - xt[0] : 1;
    for (double t : yt) {
      absl::StrAppendFormat(
          &svg,
          "<line x1=\"%d\" x2=\"%.1f\" y1=\"%.1f\" y2=\"%.1f\" stroke=\"#e5e5e5\"/>"
          "<text x=\"%d\" y=\"%.1f\" text-anchor=\"end\" fill=\"#555\">%s</text>\n",
          left, left + pw, py(t), py(t), left - 6, py(t) + 4, TickLabel(t, ystep));
    }
    for (double t : xt) {
      absl::StrAppendFormat(
          &svg,
          "<line x1=\"%.1f\" x2=\"%.1f\" y1=\"%.1f\" y2=\"%.1f\" stroke=\"#f0f0f0\"/>"
          "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" fill=\"#555\">%s</text>\n",
          px(t), px(t), py(y0), py(y1), px(t), py(y0) + 16, TickLabel(t, xstep));
    }
    absl::StrAppendFormat(&svg,
                          "<rect x=\"%d\" y=\"%d\" width=\"%.1f\" height=\"%.1f\" fill=\"none\" "
                          "stroke=\"#888\"/>\n",
                          left, y_off + top, pw, ph);
    absl::StrAppendFormat(
        &svg, "<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\" fill=\"#333\">%s</text>\n",
        left + pw / 2, y_off + panel_height - 8, Escape(x_label));
    absl::StrAppendFormat(
        &svg,
        "<text transform=\"translate(16 %.1f) rotate(-90)\" text-anchor=\"middle\" "
        "fill=\"#333\">%s</text>\n",
        y_off + top + ph / 2, Escape(p.y_label));
    int legend = 0;
    for (const PlotSeries& s : p.series) {
      std::string d;
      for (size_t i = 0; i < s.x.size() && i < s.y.size(); ++i) {
        if (!std::isfinite(s.x[i]) || !std::isfinite(s.y[i])) continue;
        absl::StrAppendFormat(&d, "%s%.1f %.1f", d.empty() ? "M" : "L", px(s.x[i]), py(s.y[i]));
      }
      if (d.empty()) continue;
      const char* color = kPalette[static_cast<size_t>(std::abs(s.color)) % 8];
      absl::StrAppendFormat(&svg,
                            "<path class=\"series\" d=\"%s\" fill=\"none\" stroke=\"%s\" "
                            "stroke-width=\"1.6\"%s><title>%s</title></path>\n",
                            d, color, s.dashed ? " stroke-dasharray=\"6 4\"" : "", Escape(s.name));
      const double ly = y_off + top + 14 + 16 * legend++;
      absl::StrAppendFormat(&svg,
                            "<line x1=\"%.1f\" x2=\"%.1f\" y1=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" "
                            "stroke-width=\"2\"%s/><text x=\"%.1f\" y=\"%.1f\">%s</text>\n",
                            left + pw - 230, left + pw - 205, ly - 4, ly - 4, color,
                            s.dashed ? " stroke-dasharray=\"6 4\"" : "", left + pw - 198, ly,
                            Escape(s.name));
    }
  }
  svg += "</svg>\n";
  return svg;
}

}  // namespace rt::observe
