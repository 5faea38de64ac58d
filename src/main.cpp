// ringtrain: one binary, run unchanged on every peer. This file only dispatches to
// the subcommands in src/cli/ and handles the parts of the command line that are
// common to all of them (--help, dashed flag names, flags a subcommand does not use,
// the OpenMP wait policy of the subcommands that compute).
#include <limits.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "absl/flags/reflection.h"
#include "absl/strings/str_replace.h"
#include "cli/command_line.h"
#include "cli/subcommand.h"
#include "cli/test_hooks.h"
#include "cli/version.h"
#include "core/cpu_features.h"

namespace {

std::vector<const rt::cli::Subcommand*> AllSubcommands() {
  return {&rt::cli::PrepareSubcommand(),  &rt::cli::TrainSubcommand(), &rt::cli::EvalSubcommand(),
          &rt::cli::SampleSubcommand(),   &rt::cli::PlanSubcommand(),  &rt::cli::BenchSubcommand(),
          &rt::cli::StatusSubcommand(),   &rt::cli::PlotSubcommand(),  &rt::cli::ExportSubcommand(),
          &rt::cli::FetchDataSubcommand()};
}

// To stdout for --help; to stderr (exit 2) when the command is missing.
void PrintTopLevelHelp(FILE* out) {
  std::fprintf(
      out,
      "ringtrain: train one GPT on a ring of CPU machines.\n\n"
      "usage: ringtrain <command> [flags]    (ringtrain <command> --help for its flags)\n\n");
  for (const auto* sub : AllSubcommands()) {
    std::fprintf(out, "  %-9s %s\n", sub->name.c_str(), sub->summary.c_str());
  }
  std::fprintf(
      out,
      "\nFlags may be written --seq-len or --seq_len; --flagfile=FILE reads flags from FILE.\n"
      "ringtrain --version prints the version, the commit and this CPU's compute paths.\n");
}

std::string Dashed(std::string name) { return absl::StrReplaceAll(name, {{"_", "-"}}); }

void PrintSubcommandHelp(const rt::cli::Subcommand& sub) {
  std::printf("%s\n\n%s\n", sub.summary.c_str(), sub.usage.c_str());
  if (sub.flags.empty()) return;
  std::printf("\nflags:\n");
  for (const std::string& name : sub.flags) {
    const absl::CommandLineFlag* flag = absl::FindCommandLineFlag(name);
    if (flag == nullptr) continue;
    std::string default_value = flag->DefaultValue();
    for (const auto& [overridden, value] : sub.flag_defaults) {
      if (overridden == name) default_value = value;
    }
    std::printf("  --%s (default: %s)\n      %s\n", Dashed(name).c_str(), default_value.c_str(),
                flag->Help().c_str());
  }
}

// The arguments the kernel started this process with, from /proc/self/cmdline (NUL
// separated); empty if it cannot be read.
std::vector<std::string> StartCommandLine() {
  std::vector<std::string> args;
  FILE* f = std::fopen("/proc/self/cmdline", "rb");
  if (f == nullptr) return args;
  std::string all;
  char buf[4096];
  for (size_t got; (got = std::fread(buf, 1, sizeof(buf), f)) > 0;) all.append(buf, got);
  std::fclose(f);
  for (size_t at = 0; at < all.size();) {
    const size_t end = all.find('\0', at);
    args.push_back(all.substr(at, end == std::string::npos ? std::string::npos : end - at));
    if (end == std::string::npos) break;
    at = end + 1;
  }
  return args;
}

// libgomp reads OMP_WAIT_POLICY once, before main. Its default (spin for a while)
// costs dearly when cores are shared: with the Asio I/O threads of the ring, or on an
// oversubscribed VPS, spinning compute threads starve them (measured on 2 shared
// cores: 2-thread MFU 46% -> 76% with PASSIVE). So unless the user chose a policy, a
// subcommand that runs OpenMP re-executes the binary once with PASSIVE; the others
// (prepare, plan, --help, ...) never pay for the exec.
//
// The exec names the resolved binary, never /proc/self/exe: the kernel names a
// process after the file it executes, and a process named `exe` is invisible to
// `pkill -x ringtrain`, `pidof` and `top` (peers are signalled with pkill).
//
// It passes the command line the kernel started this process with (/proc/self/cmdline),
// not main's argv: the release starts the binary through its own copy of the dynamic
// loader (`lib/ringtrain --library-path lib --argv0 ... lib/ringtrain.bin ARGS`), so
// /proc/self/exe is the loader and only the whole original command line starts the same
// program again with the same libraries. Run directly, both are the same.
// Returns only if no re-exec was needed or it failed.
void EnsurePassiveOpenMpWait(char** argv) {
  if (std::getenv("OMP_WAIT_POLICY") != nullptr) return;
  std::string self(PATH_MAX, '\0');
  const ssize_t n = readlink("/proc/self/exe", self.data(), self.size() - 1);
  if (n <= 0) return;  // no /proc: carry on with libgomp's default policy
  self.resize(static_cast<size_t>(n));
  std::vector<std::string> original = StartCommandLine();
  std::vector<char*> args;
  for (std::string& a : original) args.push_back(a.data());
  args.push_back(nullptr);
  if (setenv("OMP_WAIT_POLICY", "PASSIVE", 1) != 0) return;
  execv(self.c_str(), original.empty() ? argv : args.data());
  // The binary was replaced or deleted under us (" (deleted)"): carry on spinning.
  std::fprintf(stderr, "ringtrain: cannot re-execute %s (%s); OpenMP threads will spin-wait\n",
               self.c_str(), std::strerror(errno));
}

}  // namespace

int main(int argc, char** argv) {
  // The process is `ringtrain` however it was started (a symlink, a renamed copy, a
  // wrapper, the release's loader): `pkill -HUP -x ringtrain` and `pidof ringtrain` find it.
  prctl(PR_SET_NAME, "ringtrain", 0, 0, 0);
  if (argc < 2 || std::strcmp(argv[1], "--help") == 0 || std::strcmp(argv[1], "-h") == 0 ||
      std::strcmp(argv[1], "help") == 0) {
    PrintTopLevelHelp(argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  const rt::cli::Subcommand* sub = nullptr;
  for (const auto* candidate : AllSubcommands()) {
    if (candidate->name == argv[1]) sub = candidate;
  }
  if (sub == nullptr && std::strcmp(argv[1], "--version") != 0) {
    std::fprintf(stderr, "ringtrain: unknown command '%s' (try: ringtrain --help)\n", argv[1]);
    return 2;
  }

  // A mistyped RINGTRAIN_ISA must not silently run the best path (core/cpu_features.h).
  if (absl::StatusOr<rt::Isa> isa = rt::IsaCapFromEnv(); !isa.ok()) {
    std::fprintf(stderr, "ringtrain: %s\n", std::string(isa.status().message()).c_str());
    return 2;
  }

  if (std::strcmp(argv[1], "--version") == 0) {
    if (argc > 2) {
      std::fprintf(stderr, "ringtrain: --version takes no arguments\n");
      return 2;
    }
    return rt::cli::PrintVersion();
  }

  // The test-only fault hooks' variables, before anything runs (cli/test_hooks.h).
  if (absl::Status hooks = rt::cli::CheckTestHooksInEnvironment(); !hooks.ok()) {
    std::fprintf(stderr, "ringtrain: %s\n", std::string(hooks.message()).c_str());
    return 2;
  }

  // Flags (flag files included) are checked and set by cli/command_line.h.
  absl::StatusOr<rt::cli::ParsedArgs> parsed =
      rt::cli::ParseSubcommandArgs(*sub, std::vector<std::string>(argv + 2, argv + argc));
  if (!parsed.ok()) {
    std::fprintf(stderr, "ringtrain %s: %s\n", sub->name.c_str(),
                 std::string(parsed.status().message()).c_str());
    return 2;
  }
  if (parsed->help) {
    PrintSubcommandHelp(*sub);
    return 0;
  }
  if (sub->runs_openmp) EnsurePassiveOpenMpWait(argv);
  return sub->run(parsed->positional);
}
