// `ringtrain prepare`: placeholder until its issue lands (replaced by the real command).
#include <cstdio>

#include "cli/subcommand.h"

namespace rt::cli {
namespace {
int RunPrepare(const std::vector<std::string>&) {
  std::fprintf(stderr, "ringtrain prepare: not built yet\n");
  return 1;
}
}  // namespace

const Subcommand& PrepareSubcommand() {
  static const Subcommand sub{"prepare", "(not built yet)", "ringtrain prepare", {}, &RunPrepare};
  return sub;
}

}  // namespace rt::cli
