// Line charts as a self-contained SVG file (`ringtrain plot`): panels stacked
// vertically sharing one x axis label, each with axes, "nice" ticks, a grid and a
// legend; series may be dashed. Pure text out: no fonts or scripts from elsewhere.
#pragma once

#include <string>
#include <vector>

namespace rt::observe {

struct PlotSeries {
  std::string name;
  std::vector<double> x, y;  // the same length; non-finite points are skipped
  int color = 0;             // index into a fixed palette
  bool dashed = false;
};

struct PlotPanel {
  std::string title;    // above the panel
  std::string y_label;  // beside the y axis
  std::vector<PlotSeries> series;
};

std::string RenderSvgPlot(const std::vector<PlotPanel>& panels, const std::string& x_label,
                          int width = 960, int panel_height = 380);

// Tick positions covering [lo, hi] at a 1-2-5 spacing, about `target` of them.
std::vector<double> NiceTicks(double lo, double hi, int target = 6);

}  // namespace rt::observe
