// `ringtrain bench codec`: placeholder until its issue lands (replaced by the real benchmark).
#include <cstdio>

#include "cli/bench_kinds.h"

namespace rt::cli {

int RunBenchCodec(const std::vector<std::string>&) {
  std::fprintf(stderr, "ringtrain bench codec: not built yet\n");
  return 1;
}
std::vector<std::string> BenchCodecFlagNames() { return {}; }

}  // namespace rt::cli
