// Parsers of /proc text, on samples of the real formats, and a live sample.
#include "observe/system_figures.h"

#include <doctest/doctest.h>

namespace rt::observe {

TEST_CASE("the /proc parsers read the fields they need and refuse garbage") {
  CHECK(ParseRssBytes("Name:\tringtrain\nVmRSS:\t  12345 kB\nThreads:\t9\n") == 12345 * 1024);
  CHECK(!ParseRssBytes("VmRSS: lots\n").has_value());
  const char* meminfo = "MemTotal:       24608548 kB\nMemFree: 1 kB\nMemAvailable:   20000000 kB\n";
  CHECK(ParseMeminfoBytes(meminfo, "MemAvailable") == int64_t{20000000} * 1024);
  CHECK(ParseMeminfoBytes(meminfo, "MemTotal") == int64_t{24608548} * 1024);
  CHECK(!ParseMeminfoBytes(meminfo, "SwapTotal").has_value());
  auto t = ParseCpuTicks("cpu  100 0 50 800 10 0 5 35 7 0\ncpu0 1 2 3 4 5 6 7 8\n");
  REQUIRE(t.has_value());
  CHECK(t->total == 1000);
  CHECK(t->steal == 35);
  CHECK(!ParseCpuTicks("cpu 1 2 3\n").has_value());
  CHECK(ParseLoad1("0.52 0.58 0.59 1/467 12345\n") == doctest::Approx(0.52));
  CHECK(!ParseLoad1("").has_value());
}

TEST_CASE("a live sample of this machine") {
  SystemSampler s;
  SystemFigures a = s.Sample("/tmp");
  CHECK(a.rss_bytes > 0);
  CHECK(a.mem_total_bytes > 0);
  CHECK(a.cpus > 0);
  CHECK(a.disk_free_bytes > 0);
  CHECK(a.cpu_steal < 0);  // one sample: no fraction yet
  SystemFigures b = s.Sample("");
  CHECK(b.disk_free_bytes == -1);
}

}  // namespace rt::observe
