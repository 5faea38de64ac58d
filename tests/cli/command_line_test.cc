// A subcommand's command line and its flag files (cli/command_line.h):
// a flag file accepts what the command line accepts (both spellings, --flag value,
// comments, quotes) and refuses what it refuses, naming FILE:LINE.
#include "cli/command_line.h"

#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/match.h"
#include "temp_dir.h"

// Flags of a fake subcommand; cltest_other exists but the fake subcommand does not use it.
ABSL_FLAG(int, cltest_count, 1, "test");
ABSL_FLAG(std::string, cltest_text, "", "test");
ABSL_FLAG(bool, cltest_switch, false, "test");
ABSL_FLAG(int, cltest_other, 0, "test");

namespace rt::cli {
namespace {

using ::rt::testing::TempDir;
using ::rt::testing::WriteFile;

const Subcommand& Fake() {
  static const Subcommand sub{
      "fake", "fake", "fake", {"cltest_count", "cltest_text", "cltest_switch"}, nullptr};
  return sub;
}

void Reset() {
  absl::SetFlag(&FLAGS_cltest_count, 1);
  absl::SetFlag(&FLAGS_cltest_text, "");
  absl::SetFlag(&FLAGS_cltest_switch, false);
}

std::string ErrorOf(const std::vector<std::string>& args) {
  Reset();
  absl::StatusOr<ParsedArgs> r = ParseSubcommandArgs(Fake(), args);
  REQUIRE_FALSE(r.ok());
  return std::string(r.status().message());
}

}  // namespace

TEST_CASE("command line: both spellings, --flag=value and --flag value, bools, positionals") {
  Reset();
  auto r = ParseSubcommandArgs(Fake(), {"pos1", "--cltest-count", "7", "--cltest_text=a b",
                                        "--cltest-switch", "--", "--not-a-flag"});
  REQUIRE(r.ok());
  CHECK(absl::GetFlag(FLAGS_cltest_count) == 7);
  CHECK(absl::GetFlag(FLAGS_cltest_text) == "a b");
  CHECK(absl::GetFlag(FLAGS_cltest_switch));
  CHECK(r->positional == std::vector<std::string>{"pos1", "--not-a-flag"});
  r = ParseSubcommandArgs(Fake(), {"--nocltest-switch", "--cltest-count=-3"});
  REQUIRE(r.ok());
  CHECK_FALSE(absl::GetFlag(FLAGS_cltest_switch));
  CHECK(absl::GetFlag(FLAGS_cltest_count) == -3);
  CHECK(ParseSubcommandArgs(Fake(), {"--cltest-count", "9", "--help"})->help);
}

TEST_CASE("command line: unknown, unused, valueless and ill-typed flags are refused by name") {
  CHECK(ErrorOf({"--cltest-cuont=3"}) == "unknown flag --cltest-cuont (see ringtrain fake --help)");
  CHECK(ErrorOf({"--cltest-other=3"}) ==
        "unknown flag --cltest-other: ringtrain fake does not use it (see ringtrain fake --help)");
  CHECK(ErrorOf({"--cltest-count"}) == "--cltest-count needs a value");
  CHECK(ErrorOf({"--cltest-count=many"}).find("--cltest-count=many: ") == 0);
}

TEST_CASE("flag file: the command line's syntax, comments, quotes, and where it stands") {
  TempDir dir;
  const std::string file = dir / "fake.flags";
  WriteFile(file,
            "# a comment\n"
            "\n"
            "  --cltest-count=4  \r\n"
            "--cltest_text \"Xin chào\"\n"
            "--cltest-switch\n");
  Reset();
  auto r = ParseSubcommandArgs(Fake(), {"--flagfile=" + file});
  REQUIRE(r.ok());
  CHECK(absl::GetFlag(FLAGS_cltest_count) == 4);
  CHECK(absl::GetFlag(FLAGS_cltest_text) == "Xin chào");
  CHECK(absl::GetFlag(FLAGS_cltest_switch));
  // Later flags win, whether they come from the command line or a file.
  r = ParseSubcommandArgs(Fake(), {"--flagfile", file, "--cltest-count", "5"});
  REQUIRE(r.ok());
  CHECK(absl::GetFlag(FLAGS_cltest_count) == 5);
  r = ParseSubcommandArgs(Fake(), {"--cltest-count=5", "--flag-file=" + file});
  CHECK_FALSE(r.ok());  // --flag-file is --flag_file, not --flagfile: an unknown flag
  r = ParseSubcommandArgs(Fake(), {"--cltest-count=5", "--flagfile=" + file});
  REQUIRE(r.ok());
  CHECK(absl::GetFlag(FLAGS_cltest_count) == 4);
}

TEST_CASE("flag file text parses without a file, each flag with its line") {
  auto args = ParseFlagFileText("# c\n--cltest-count 3\n\n--cltest_text='a b'\n--cltest-switch\n",
                                "mem.flags");
  REQUIRE(args.ok());
  REQUIRE(args->size() == 3);
  CHECK((*args)[0].text == "--cltest-count=3");
  CHECK((*args)[0].origin == "mem.flags:2");
  CHECK((*args)[1].text == "--cltest_text=a b");
  CHECK((*args)[2].text == "--cltest-switch");
  CHECK((*args)[2].origin == "mem.flags:5");
  auto bad = ParseFlagFileText("--cltest-count=1\nstray\n", "mem.flags");
  REQUIRE_FALSE(bad.ok());
  CHECK(absl::StartsWith(bad.status().message(), "mem.flags:2: 'stray' is not a flag"));
}

TEST_CASE("flag file: nested files, comma lists, self-inclusion") {
  TempDir dir;
  WriteFile(dir / "a.flags", "--cltest-count 2\n--flagfile=" + dir / "b.flags" + "\n");
  WriteFile(dir / "b.flags", "--cltest-text=b\n");
  WriteFile(dir / "c.flags", "--cltest-switch=true\n");
  Reset();
  REQUIRE(
      ParseSubcommandArgs(Fake(), {"--flagfile=" + dir / "a.flags" + "," + dir / "c.flags"}).ok());
  CHECK(absl::GetFlag(FLAGS_cltest_count) == 2);
  CHECK(absl::GetFlag(FLAGS_cltest_text) == "b");
  CHECK(absl::GetFlag(FLAGS_cltest_switch));
  WriteFile(dir / "loop.flags", "--cltest-count=1\n--flagfile " + dir / "loop.flags" + "\n");
  CHECK(ErrorOf({"--flagfile=" + dir / "loop.flags"}) ==
        dir / "loop.flags:2: --flagfile " + dir / "loop.flags includes itself");
}

TEST_CASE("flag file: every refusal names FILE:LINE") {
  TempDir dir;
  const std::string f = dir / "bad.flags";
  WriteFile(f, "# ok\n--cltest-count=3\n--cltest-other=1\n");
  CHECK(ErrorOf({"--flagfile=" + f}) == f + ":3: unknown flag --cltest-other: ringtrain fake "
                                            "does not use it (see ringtrain fake --help)");
  WriteFile(f, "--cltest-cuont=3\n");
  CHECK(ErrorOf({"--flagfile=" + f}) == f + ":1: unknown flag --cltest-cuont (see ringtrain "
                                            "fake --help)");
  WriteFile(f, "\n--cltest-count\n--cltest-text=x\n");
  CHECK(ErrorOf({"--flagfile=" + f}) == f + ":2: --cltest-count needs a value");
  WriteFile(f, "--cltest-count three\n");
  CHECK(ErrorOf({"--flagfile=" + f}).find(f + ":1: --cltest-count=three: ") == 0);
  WriteFile(f, "--cltest-count=3\ncltest-text=x\n");
  CHECK(ErrorOf({"--flagfile=" + f}).find(f + ":2: 'cltest-text=x' is not a flag") == 0);
  CHECK(ErrorOf({"--flagfile=" + dir / "missing.flags"}) ==
        "--flagfile " + dir / "missing.flags: cannot read it: No such file or directory");
  WriteFile(f, "--flagfile=" + dir / "missing.flags\n");
  CHECK(ErrorOf({"--flagfile=" + f}).find(f + ":1: --flagfile " + dir / "missing.flags") == 0);
  CHECK(ErrorOf({"--flagfile=" + dir.path()}).find("not a regular file") != std::string::npos);
  CHECK(ErrorOf({"--flagfile"}) == "--flagfile needs a value");
}

}  // namespace rt::cli
