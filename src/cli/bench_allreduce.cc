// `ringtrain bench allreduce`: placeholder until its issue lands (replaced by the real benchmark).
#include <cstdio>

#include "cli/bench_kinds.h"

namespace rt::cli {

int RunBenchAllreduce(const std::vector<std::string>&) {
  std::fprintf(stderr, "ringtrain bench allreduce: not built yet\n");
  return 1;
}
std::vector<std::string> BenchAllreduceFlagNames() { return {}; }

}  // namespace rt::cli
