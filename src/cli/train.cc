// `ringtrain train`: placeholder until its issue lands (replaced by the real command).
#include <cstdio>

#include "cli/subcommand.h"

namespace rt::cli {
namespace {
int RunTrain(const std::vector<std::string>&) {
  std::fprintf(stderr, "ringtrain train: not built yet\n");
  return 1;
}
}  // namespace

const Subcommand& TrainSubcommand() {
  static const Subcommand sub{"train", "(not built yet)", "ringtrain train", {}, &RunTrain};
  return sub;
}

}  // namespace rt::cli
