// `ringtrain plan`: placeholder until its issue lands (replaced by the real command).
#include <cstdio>

#include "cli/subcommand.h"

namespace rt::cli {
namespace {
int RunPlan(const std::vector<std::string>&) {
  std::fprintf(stderr, "ringtrain plan: not built yet\n");
  return 1;
}
}  // namespace

const Subcommand& PlanSubcommand() {
  static const Subcommand sub{"plan", "(not built yet)", "ringtrain plan", {}, &RunPlan};
  return sub;
}

}  // namespace rt::cli
