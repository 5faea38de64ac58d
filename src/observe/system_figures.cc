// /proc and statvfs readings (see system_figures.h).
#include "observe/system_figures.h"

#include <sys/statvfs.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace rt::observe {
namespace {

std::string ReadSmallFile(const char* path) {
  std::ifstream in(path);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// The value in kB after "key:" on its own line, in bytes.
std::optional<int64_t> KbField(absl::string_view text, absl::string_view key) {
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    if (!absl::ConsumePrefix(&line, key) || !absl::ConsumePrefix(&line, ":")) continue;
    std::vector<absl::string_view> parts =
        absl::StrSplit(line, absl::ByAnyChar(" \t"), absl::SkipEmpty());
    int64_t kb = 0;
    if (parts.empty() || !absl::SimpleAtoi(parts[0], &kb) || kb < 0) return std::nullopt;
    return kb * 1024;
  }
  return std::nullopt;
}

}  // namespace

std::optional<int64_t> ParseRssBytes(absl::string_view proc_self_status) {
  return KbField(proc_self_status, "VmRSS");
}

std::optional<int64_t> ParseMeminfoBytes(absl::string_view meminfo, absl::string_view key) {
  return KbField(meminfo, key);
}

std::optional<CpuTicks> ParseCpuTicks(absl::string_view proc_stat) {
  for (absl::string_view line : absl::StrSplit(proc_stat, '\n')) {
    if (!absl::ConsumePrefix(&line, "cpu ")) continue;
    std::vector<absl::string_view> f = absl::StrSplit(line, ' ', absl::SkipEmpty());
    // user nice system idle iowait irq softirq steal [guest guest_nice]: guest time is
    // already counted in user, so the total is the first eight.
    if (f.size() < 8) return std::nullopt;
    CpuTicks t;
    for (size_t i = 0; i < 8; ++i) {
      uint64_t v = 0;
      if (!absl::SimpleAtoi(f[i], &v)) return std::nullopt;
      t.total += v;
      if (i == 7) t.steal = v;
    }
    return t;
  }
  return std::nullopt;
}

std::optional<double> ParseLoad1(absl::string_view loadavg) {
  std::vector<absl::string_view> f = absl::StrSplit(loadavg, ' ', absl::SkipEmpty());
  double v = 0;
  if (f.empty() || !absl::SimpleAtod(f[0], &v) || v < 0) return std::nullopt;
  return v;
}

SystemFigures SystemSampler::Sample(const std::string& disk_dir) {
  SystemFigures s;
  if (auto rss = ParseRssBytes(ReadSmallFile("/proc/self/status"))) s.rss_bytes = *rss;
  const std::string meminfo = ReadSmallFile("/proc/meminfo");
  if (auto v = ParseMeminfoBytes(meminfo, "MemAvailable")) s.mem_available_bytes = *v;
  if (auto v = ParseMeminfoBytes(meminfo, "MemTotal")) s.mem_total_bytes = *v;
  if (auto load = ParseLoad1(ReadSmallFile("/proc/loadavg"))) s.load1 = *load;
  s.cpus = static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN));
  if (auto ticks = ParseCpuTicks(ReadSmallFile("/proc/stat"))) {
    if (last_ && ticks->total > last_->total && ticks->steal >= last_->steal) {
      s.cpu_steal = static_cast<double>(ticks->steal - last_->steal) /
                    static_cast<double>(ticks->total - last_->total);
    }
    last_ = ticks;
  }
  struct statvfs vfs;
  if (!disk_dir.empty() && statvfs(disk_dir.c_str(), &vfs) == 0) {
    s.disk_free_bytes = static_cast<int64_t>(vfs.f_bavail) * static_cast<int64_t>(vfs.f_frsize);
  }
  return s;
}

}  // namespace rt::observe
