// ringtrain: one binary, run unchanged on every peer. This file only dispatches to
// the subcommands in src/cli/ and handles the parts of the command line that are
// common to all of them (--help, dashed flag names, flags a subcommand does not use).
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/flags/parse.h"
#include "absl/flags/reflection.h"
#include "absl/strings/str_replace.h"
#include "cli/subcommand.h"

namespace {

std::vector<const rt::cli::Subcommand*> AllSubcommands() {
  return {&rt::cli::PrepareSubcommand(), &rt::cli::TrainSubcommand(), &rt::cli::EvalSubcommand(),
          &rt::cli::SampleSubcommand(),  &rt::cli::PlanSubcommand(),  &rt::cli::BenchSubcommand()};
}

void PrintTopLevelHelp() {
  std::printf(
      "ringtrain: train one GPT on a ring of CPU machines.\n\n"
      "usage: ringtrain <command> [flags]    (ringtrain <command> --help for its flags)\n\n");
  for (const auto* sub : AllSubcommands()) {
    std::printf("  %-9s %s\n", sub->name.c_str(), sub->summary.c_str());
  }
  std::printf(
      "\nFlags may be written --seq-len or --seq_len; --flagfile=FILE reads flags from FILE.\n");
}

std::string Dashed(std::string name) { return absl::StrReplaceAll(name, {{"_", "-"}}); }

void PrintSubcommandHelp(const rt::cli::Subcommand& sub) {
  std::printf("%s\n\n%s\n", sub.summary.c_str(), sub.usage.c_str());
  if (sub.flags.empty()) return;
  std::printf("\nflags:\n");
  for (const std::string& name : sub.flags) {
    const absl::CommandLineFlag* flag = absl::FindCommandLineFlag(name);
    if (flag == nullptr) continue;
    std::printf("  --%s (default: %s)\n      %s\n", Dashed(name).c_str(),
                flag->DefaultValue().c_str(), flag->Help().c_str());
  }
}

// "--seq-len=4" -> "--seq_len=4": Abseil flag names cannot contain dashes, DESIGN's can.
std::string NormalizeFlagToken(const std::string& arg) {
  if (arg.size() < 3 || arg.compare(0, 2, "--") != 0) return arg;
  size_t eq = arg.find('=');
  std::string name = arg.substr(2, eq == std::string::npos ? std::string::npos : eq - 2);
  std::string rest = eq == std::string::npos ? "" : arg.substr(eq);
  return "--" + absl::StrReplaceAll(name, {{"-", "_"}}) + rest;
}

// Returns the flag name of a "--name[=v]" / "--noname" token, or "" for a positional.
std::string FlagNameOf(const std::string& arg) {
  if (arg.size() < 3 || arg.compare(0, 2, "--") != 0) return "";
  size_t eq = arg.find('=');
  return arg.substr(2, eq == std::string::npos ? std::string::npos : eq - 2);
}

// libgomp reads OMP_WAIT_POLICY once, before main. Its default (spin for a while)
// costs dearly when cores are shared: with the Asio I/O threads of the ring, or on an
// oversubscribed VPS, spinning compute threads starve them (measured on 2 shared
// cores: 2-thread MFU 46% -> 76% with PASSIVE). So unless the user chose a policy,
// re-exec ourselves once with PASSIVE. Returns only if the re-exec failed or was not needed.
void EnsurePassiveOpenMpWait(char** argv) {
  if (std::getenv("OMP_WAIT_POLICY") != nullptr) return;
  if (setenv("OMP_WAIT_POLICY", "PASSIVE", 1) != 0) return;
  execv("/proc/self/exe", argv);
  // exec failed (no /proc?): carry on with the default policy.
}

}  // namespace

int main(int argc, char** argv) {
  EnsurePassiveOpenMpWait(argv);
  if (argc < 2 || std::strcmp(argv[1], "--help") == 0 || std::strcmp(argv[1], "-h") == 0 ||
      std::strcmp(argv[1], "help") == 0) {
    PrintTopLevelHelp();
    return argc < 2 ? 2 : 0;
  }
  const rt::cli::Subcommand* sub = nullptr;
  for (const auto* candidate : AllSubcommands()) {
    if (candidate->name == argv[1]) sub = candidate;
  }
  if (sub == nullptr) {
    std::fprintf(stderr, "ringtrain: unknown command '%s' (try: ringtrain --help)\n", argv[1]);
    return 2;
  }

  // Rebuild argv as "ringtrain <sub>" followed by normalized flags.
  std::vector<std::string> args;
  args.push_back(std::string("ringtrain ") + sub->name);
  absl::flat_hash_set<std::string> allowed(sub->flags.begin(), sub->flags.end());
  allowed.insert("flagfile");
  bool after_double_dash = false;
  for (int i = 2; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--") after_double_dash = true;
    if (!after_double_dash && (arg == "--help" || arg == "-h" || arg == "--helpfull")) {
      PrintSubcommandHelp(*sub);
      return 0;
    }
    if (!after_double_dash) arg = NormalizeFlagToken(arg);
    std::string name = after_double_dash ? "" : FlagNameOf(arg);
    if (!name.empty()) {
      bool known = allowed.contains(name) ||
                   (name.compare(0, 2, "no") == 0 && allowed.contains(name.substr(2)));
      if (!known) {
        std::fprintf(stderr, "ringtrain %s: unknown flag --%s (see ringtrain %s --help)\n",
                     sub->name.c_str(), Dashed(name).c_str(), sub->name.c_str());
        return 2;
      }
    }
    args.push_back(arg);
  }
  std::vector<char*> cargs;
  for (std::string& a : args) cargs.push_back(a.data());
  std::vector<char*> rest = absl::ParseCommandLine(static_cast<int>(cargs.size()), cargs.data());
  std::vector<std::string> positional;
  for (size_t i = 1; i < rest.size(); ++i) positional.emplace_back(rest[i]);
  return sub->run(positional);
}
