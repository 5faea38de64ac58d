// `ringtrain plot RUN.jsonl... -o FILE.svg [--x step|tokens|time]`: the loss and
// validation bits-per-byte curves of one or more runs' --metrics files, overlaid in
// one SVG (observe/svg_plot.h) with a legend per run (the file name).
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "cli/subcommand.h"
#include "observe/json.h"
#include "observe/svg_plot.h"

ABSL_FLAG(std::string, o, "", "plot: the SVG file to write");
ABSL_FLAG(std::string, x, "step",
          "plot: x axis: step, tokens or time (hours since the run's first line)");

namespace rt::cli {
namespace {

struct Run {
  std::string name;
  std::vector<double> x, loss, val_x, val_loss, val_bpb;
  int bad_lines = 0;
};

std::string BaseName(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

// Reads one metrics file; lines that are not JSON objects are counted, not fatal (a
// run that was killed may end in half a line).
absl::StatusOr<Run> ReadRun(const std::string& path, const std::string& axis) {
  std::ifstream in(path);
  if (!in) {
    return absl::NotFoundError(absl::StrCat("cannot read ", path, ": ", std::strerror(errno)));
  }
  Run run;
  run.name = BaseName(path);
  std::string line;
  double first_time = NAN;
  int line_no = 0;
  while (std::getline(in, line)) {
    ++line_no;
    if (line.empty()) continue;
    if (line.size() > (1 << 20)) {
      ++run.bad_lines;
      continue;
    }
    absl::StatusOr<observe::JsonValue> v = observe::ParseJson(line);
    if (!v.ok() || !v->is_object()) {
      ++run.bad_lines;
      continue;
    }
    const double step = v->NumberOr("step", NAN);
    if (!std::isfinite(step)) {
      ++run.bad_lines;
      continue;
    }
    double x = step;
    if (axis == "tokens") {
      x = v->NumberOr("tokens", NAN);
    } else if (axis == "time") {
      const double t = v->NumberOr("time", NAN);
      if (!std::isfinite(t)) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "%s:%d has no \"time\" (written by an older ringtrain): plot it with --x step or "
            "--x tokens",
            path, line_no));
      }
      if (!std::isfinite(first_time)) first_time = t;
      x = (t - first_time) / 3600;
    }
    if (step > 0) {
      run.x.push_back(x);
      run.loss.push_back(v->NumberOr("loss", NAN));
    }
    const double val_loss = v->NumberOr("val_loss", NAN);
    const double val_bpb = v->NumberOr("val_bpb", NAN);
    if (std::isfinite(val_loss) || std::isfinite(val_bpb)) {
      run.val_x.push_back(x);
      run.val_loss.push_back(val_loss);
      run.val_bpb.push_back(val_bpb);
    }
  }
  if (run.x.empty() && run.val_x.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, " holds no metrics lines (a --metrics file of ringtrain train)"));
  }
  return run;
}

int RunPlot(const std::vector<std::string>& positional) {
  const std::string out = absl::GetFlag(FLAGS_o);
  const std::string axis = absl::GetFlag(FLAGS_x);
  if (positional.empty()) {
    std::fprintf(stderr, "ringtrain plot: name at least one metrics file (RUN.jsonl)\n");
    return 2;
  }
  if (out.empty()) {
    std::fprintf(stderr, "ringtrain plot: -o FILE.svg is required\n");
    return 2;
  }
  if (axis != "step" && axis != "tokens" && axis != "time") {
    std::fprintf(stderr, "ringtrain plot: --x must be step, tokens or time, got '%s'\n",
                 axis.c_str());
    return 2;
  }
  observe::PlotPanel loss{"Loss", "nats per token", {}};
  observe::PlotPanel bpb{"Validation bits per byte", "bits per byte", {}};
  int color = 0;
  for (const std::string& path : positional) {
    absl::StatusOr<Run> run = ReadRun(path, axis);
    if (!run.ok()) {
      std::fprintf(stderr, "ringtrain plot: %s\n", std::string(run.status().message()).c_str());
      return 1;
    }
    if (run->bad_lines > 0) {
      std::fprintf(stderr, "ringtrain plot: %s: skipped %d line(s) that are not metrics\n",
                   path.c_str(), run->bad_lines);
    }
    loss.series.push_back({run->name + " train", run->x, run->loss, color, false});
    loss.series.push_back({run->name + " val", run->val_x, run->val_loss, color, true});
    bpb.series.push_back({run->name, run->val_x, run->val_bpb, color, false});
    std::printf("%s: %zu steps, %zu evaluations\n", path.c_str(), run->x.size(), run->val_x.size());
    ++color;
  }
  const std::string x_label = axis == "step"     ? "optimizer step"
                              : axis == "tokens" ? "tokens trained"
                                                 : "hours since the first line";
  const std::string svg = observe::RenderSvgPlot({loss, bpb}, x_label);
  const std::string tmp = out + ".tmp";
  std::FILE* f = std::fopen(tmp.c_str(), "w");
  if (f == nullptr || std::fwrite(svg.data(), 1, svg.size(), f) != svg.size() ||
      std::fclose(f) != 0 || std::rename(tmp.c_str(), out.c_str()) != 0) {
    std::fprintf(stderr, "ringtrain plot: cannot write %s: %s\n", out.c_str(),
                 std::strerror(errno));
    std::remove(tmp.c_str());
    return 1;
  }
  std::printf("wrote %s\n", out.c_str());
  return 0;
}

}  // namespace

const Subcommand& PlotSubcommand() {
  static const Subcommand sub{
      "plot",
      "Draw the loss and val bits-per-byte curves of runs' --metrics files into an SVG",
      "ringtrain plot RUN.jsonl... -o FILE.svg [--x step|tokens|time]\n"
      "One line per run (named after its file): train loss (solid) and validation loss\n"
      "(dashed) in the upper panel, validation bits per byte below.",
      {"o", "x"},
      &RunPlot};
  return sub;
}

}  // namespace rt::cli
