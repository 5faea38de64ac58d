// `ringtrain plot`'s output: metrics files of two runs become one SVG that an XML
// parser reads, with one path per series (train and validation loss, validation bits
// per byte) holding one point per metrics line, and the run's loss falling as drawn.
#include <doctest/doctest.h>

#include <fstream>
#include <map>
#include <regex>
#include <string>
#include <vector>

#include "cli_runner.h"
#include "process_group.h"

namespace {

using rt::integration::ReadFile;
using rt::integration::RunCommand;
using rt::integration::RunResult;
using rt::integration::RunRingtrain;
using rt::integration::TempDir;

struct Path {
  int points = 0;
  std::vector<double> y;  // SVG y of each point (down the page)
};

// The series paths of an SVG by their <title>.
std::map<std::string, Path> SeriesPaths(const std::string& svg) {
  std::map<std::string, Path> out;
  const std::regex path_re("<path class=\"series\" d=\"([^\"]*)\"[^>]*><title>([^<]*)</title>");
  const std::regex point_re("[ML](-?[0-9.]+) (-?[0-9.]+)");
  for (std::sregex_iterator it(svg.begin(), svg.end(), path_re), end; it != end; ++it) {
    Path p;
    const std::string d = (*it)[1].str();
    for (std::sregex_iterator pt(d.begin(), d.end(), point_re); pt != end; ++pt) {
      ++p.points;
      p.y.push_back(std::stod((*pt)[2].str()));
    }
    out[(*it)[2].str()] = p;
  }
  return out;
}

TEST_CASE("plot: two runs' metrics become a valid SVG with every series and point") {
  TempDir dir;
  {
    std::ofstream a(dir / "a.jsonl");
    // As train writes them: an evaluation adds val_loss and val_bpb to its step's line.
    for (int step = 1; step <= 5; ++step) {
      a << "{\"step\":" << step << ",\"loss\":" << 5.0 - 0.5 * step << ",\"tokens\":" << 100 * step;
      if (step % 2 == 0)
        a << ",\"val_loss\":" << 4.8 - 0.5 * step << ",\"val_bpb\":" << 2.0 - 0.1 * step;
      a << "}\n";
    }
    std::ofstream b(dir / "b.jsonl");
    for (int step = 1; step <= 3; ++step) {
      b << "{\"step\":" << step << ",\"loss\":" << 6.0 - step << ",\"tokens\":" << 50 * step
        << "}\n";
    }
  }
  const RunResult r =
      RunRingtrain({"plot", dir / "a.jsonl", dir / "b.jsonl", "-o", dir / "out.svg"}, dir.path());
  INFO("stdout: " << r.out << "\nstderr: " << r.err);
  REQUIRE(r.exit_code == 0);
  CHECK(r.out.find("a.jsonl: 5 steps, 2 evaluations") != std::string::npos);
  CHECK(r.out.find("b.jsonl: 3 steps, 0 evaluations") != std::string::npos);
  // Well-formed XML with an <svg> root, as a browser or any XML reader parses it.
  const RunResult xml =
      RunCommand({"/usr/bin/python3", "-c",
                  "import sys, xml.etree.ElementTree as E; r = E.parse(sys.argv[1]).getroot(); "
                  "print(r.tag)",
                  dir / "out.svg"},
                 dir.path(), 30);
  INFO("python: " << xml.out << xml.err);
  CHECK(xml.exit_code == 0);
  CHECK(xml.out == "{http://www.w3.org/2000/svg}svg\n");
  const std::map<std::string, Path> series = SeriesPaths(ReadFile(dir / "out.svg"));
  CHECK(series.size() == 4);  // b has no evaluations: no val or bpb path for it
  const std::map<std::string, int> want = {
      {"a.jsonl train", 5}, {"a.jsonl val", 2}, {"a.jsonl", 2}, {"b.jsonl train", 3}};
  for (const auto& [name, points] : want) {
    CAPTURE(name);
    REQUIRE(series.count(name) == 1);
    CHECK(series.at(name).points == points);
  }
  // Falling loss is drawn going down the page: SVG y grows from point to point.
  const std::vector<double>& y = series.at("a.jsonl train").y;
  for (size_t i = 1; i < y.size(); ++i) CHECK(y[i] > y[i - 1]);
}

TEST_CASE("plot: no files, no -o, a bad axis or an unreadable file -- errors, no SVG") {
  TempDir dir;
  { std::ofstream(dir / "a.jsonl") << "{\"step\":1,\"loss\":2}\n"; }
  struct Case {
    std::vector<std::string> args;
    int code;
    const char* says;
  };
  const std::vector<Case> cases = {
      {{"plot", "-o", dir / "out.svg"}, 2, "name at least one metrics file"},
      {{"plot", dir / "a.jsonl"}, 2, "-o FILE.svg is required"},
      {{"plot", dir / "a.jsonl", "-o", dir / "out.svg", "--x", "epochs"}, 2, "--x must be"},
      {{"plot", dir / "none.jsonl", "-o", dir / "out.svg"}, 1, "cannot read"},
  };
  for (const Case& c : cases) {
    const RunResult r = RunRingtrain(c.args, dir.path());
    INFO(c.says << ": " << r.err);
    CHECK(r.exit_code == c.code);
    CHECK(r.err.find(c.says) != std::string::npos);
  }
  CHECK_FALSE(std::ifstream(dir / "out.svg").good());
}

}  // namespace
