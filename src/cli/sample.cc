// `ringtrain sample`: placeholder until its issue lands (replaced by the real command).
#include <cstdio>

#include "cli/subcommand.h"

namespace rt::cli {
namespace {
int RunSample(const std::vector<std::string>&) {
  std::fprintf(stderr, "ringtrain sample: not built yet\n");
  return 1;
}
}  // namespace

const Subcommand& SampleSubcommand() {
  static const Subcommand sub{"sample", "(not built yet)", "ringtrain sample", {}, &RunSample};
  return sub;
}

}  // namespace rt::cli
