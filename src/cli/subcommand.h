// A subcommand of the `ringtrain` binary: its name, help text, the flags it reads
// and the function that runs it. src/main.cpp lists them; each lives in its own
// src/cli/<name>.cc (DESIGN: cli/ is flag parsing and human output only).
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace rt::cli {

struct Subcommand {
  std::string name;     // "train"
  std::string summary;  // one line for `ringtrain --help`
  std::string usage;    // a few lines for `ringtrain train --help`
  // Names (without "--") of the flags this subcommand reads. Any other flag on its
  // command line is an error, so a typo such as `--step` never passes silently.
  std::vector<std::string> flags;
  // `positional` excludes the program and subcommand names. Returns the exit code.
  int (*run)(const std::vector<std::string>& positional);
  // Defaults this subcommand uses instead of a flag's own (set before parsing, shown by
  // --help), e.g. bench: {"steps", "5"} where --steps is otherwise a training length.
  std::vector<std::pair<std::string, std::string>> flag_defaults = {};
  // Whether it runs OpenMP compute (model, optimizer): main then makes libgomp's
  // threads wait passively (see EnsurePassiveOpenMpWait in src/main.cpp).
  bool runs_openmp = false;
};

// One accessor per subcommand, defined in src/cli/<name>.cc.
const Subcommand& PrepareSubcommand();
const Subcommand& TrainSubcommand();
const Subcommand& EvalSubcommand();
const Subcommand& SampleSubcommand();
const Subcommand& PlanSubcommand();
const Subcommand& BenchSubcommand();
const Subcommand& StatusSubcommand();
const Subcommand& PlotSubcommand();
const Subcommand& ExportSubcommand();
const Subcommand& FetchDataSubcommand();

}  // namespace rt::cli
