// `ringtrain eval`: placeholder until its issue lands (replaced by the real command).
#include <cstdio>

#include "cli/subcommand.h"

namespace rt::cli {
namespace {
int RunEval(const std::vector<std::string>&) {
  std::fprintf(stderr, "ringtrain eval: not built yet\n");
  return 1;
}
}  // namespace

const Subcommand& EvalSubcommand() {
  static const Subcommand sub{"eval", "(not built yet)", "ringtrain eval", {}, &RunEval};
  return sub;
}

}  // namespace rt::cli
