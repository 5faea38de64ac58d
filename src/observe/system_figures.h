// The machine as a status page shows it: this process's resident memory, the
// machine's available memory, CPU time stolen by the hypervisor (the figure that
// tells a noisy VPS neighbour), load, and the free space of the checkpoint directory.
// Read from /proc and statvfs; the parsers are separate (pure) for tests.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "absl/strings/string_view.h"

namespace rt::observe {

struct SystemFigures {
  int64_t rss_bytes = -1;
  int64_t mem_available_bytes = -1, mem_total_bytes = -1;
  double cpu_steal = -1;  // fraction of all CPU time since the previous sample; <0 unknown
  double load1 = -1;
  int cpus = 0;
  int64_t disk_free_bytes = -1;  // available to this user; -1 unknown or no directory
};

// Totals of the "cpu " line of /proc/stat (clock ticks).
struct CpuTicks {
  uint64_t total = 0;
  uint64_t steal = 0;
};

// "VmRSS:  1234 kB" of /proc/self/status, in bytes.
std::optional<int64_t> ParseRssBytes(absl::string_view proc_self_status);
// MemAvailable and MemTotal of /proc/meminfo, in bytes.
std::optional<int64_t> ParseMeminfoBytes(absl::string_view meminfo, absl::string_view key);
std::optional<CpuTicks> ParseCpuTicks(absl::string_view proc_stat);
std::optional<double> ParseLoad1(absl::string_view loadavg);

// Samples the figures; keeps the previous /proc/stat totals for the steal fraction.
// Not thread-safe; one sampler per thread that samples.
class SystemSampler {
 public:
  // `disk_dir` ("" = none): the directory whose free space is reported.
  SystemFigures Sample(const std::string& disk_dir);

 private:
  std::optional<CpuTicks> last_;
};

}  // namespace rt::observe
