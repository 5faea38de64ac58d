// `ringtrain bench compute`: placeholder until its issue lands (replaced by the real benchmark).
#include <cstdio>

#include "cli/bench_kinds.h"

namespace rt::cli {

int RunBenchCompute(const std::vector<std::string>&) {
  std::fprintf(stderr, "ringtrain bench compute: not built yet\n");
  return 1;
}
std::vector<std::string> BenchComputeFlagNames() { return {}; }

}  // namespace rt::cli
