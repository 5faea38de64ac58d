// Fuzzes the flag-file parser (cli/command_line.h): ParseFlagFileText on the file's
// text, then the flags it yields through ParseSubcommandArgs for a subcommand that
// reads one flag of each kind (--flagfile lines are dropped: they would open files).
// Every parsed line is one flag argument with a PATH:LINE origin; every outcome of the
// command-line step is a status (Abseil must never be handed a value it refuses,
// which would exit the process).
#include <cstdint>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "cli/command_line.h"
#include "fuzz_check.h"

ABSL_FLAG(int32_t, fuzz_int, 0, "an int flag");
ABSL_FLAG(bool, fuzz_bool, false, "a bool flag");
ABSL_FLAG(std::string, fuzz_string, "", "a string flag");
ABSL_FLAG(double, fuzz_double, 0.5, "a double flag");
ABSL_FLAG(std::vector<std::string>, fuzz_list, {}, "a list flag");
ABSL_FLAG(int64_t, fuzz_other, 0, "a flag the fuzz subcommand does not read");

namespace {

int Run(const std::vector<std::string>&) { return 0; }

const rt::cli::Subcommand& FuzzSubcommand() {
  static const rt::cli::Subcommand sub{
      "fuzz",
      "fuzzes flag files",
      "ringtrain fuzz [flags]",
      {"fuzz_int", "fuzz_bool", "fuzz_string", "fuzz_double", "fuzz_list"},
      &Run};
  return sub;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::string_view text(reinterpret_cast<const char*>(data), size);
  const std::string path = "fuzz.flags";
  auto args = rt::cli::ParseFlagFileText(text, path);
  if (!args.ok()) {
    rt::fuzz::CheckErrorCode(args.status(), {absl::StatusCode::kInvalidArgument});
    FUZZ_CHECK(absl::StartsWith(args.status().message(), path + ":"));
    return 0;
  }
  const size_t lines = std::count(text.begin(), text.end(), '\n') + 1;
  std::vector<std::string> command_line;
  for (const rt::cli::OriginArg& a : *args) {
    FUZZ_CHECK(a.text.size() >= 2 && a.text[0] == '-');
    FUZZ_CHECK(absl::StartsWith(a.origin, path + ":"));
    size_t line = 0;
    FUZZ_CHECK(absl::SimpleAtoi(a.origin.substr(path.size() + 1), &line));
    FUZZ_CHECK(line >= 1 && line <= lines);
    if (absl::StrContains(a.text, "flagfile")) continue;
    command_line.push_back(a.text);
  }
  auto parsed = rt::cli::ParseSubcommandArgs(FuzzSubcommand(), command_line);
  if (!parsed.ok()) {
    rt::fuzz::CheckErrorCode(parsed.status(), {absl::StatusCode::kInvalidArgument});
  }
  return 0;
}
