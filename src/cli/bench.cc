// `ringtrain bench`: placeholder until its issue lands (replaced by the real command).
#include <cstdio>

#include "cli/subcommand.h"

namespace rt::cli {
namespace {
int RunBench(const std::vector<std::string>&) {
  std::fprintf(stderr, "ringtrain bench: not built yet\n");
  return 1;
}
}  // namespace

const Subcommand& BenchSubcommand() {
  static const Subcommand sub{"bench", "(not built yet)", "ringtrain bench", {}, &RunBench};
  return sub;
}

}  // namespace rt::cli
