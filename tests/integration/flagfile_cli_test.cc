// Flag files as the systemd recipe uses them: the example train.flags
// written in tools/ringtrain.service's comment (dashed names), with its paths moved into
// a temporary directory, starts training through --flagfile, and SIGTERM then stops it
// with a checkpoint, exit 0; a flag file holding an unknown flag or a flag `train` does
// not use is refused before anything starts, naming FILE:LINE.
#include <doctest/doctest.h>
#include <signal.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_replace.h"
#include "ckpt/checkpoint.h"
#include "cli_runner.h"
#include "data/token_dataset.h"
#include "process_group.h"

namespace {

using rt::integration::ReadFile;
using rt::integration::RunResult;
using rt::integration::RunRingtrain;
using rt::integration::TempDir;

bool Contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

// The flag lines of the example in tools/ringtrain.service's comment ("#   --name=value"
// lines after the one naming /etc/ringtrain/train.flags).
std::vector<std::string> UnitExampleFlags() {
  std::istringstream unit(ReadFile(std::string(RINGTRAIN_SOURCE_DIR) + "/tools/ringtrain.service"));
  std::vector<std::string> flags;
  bool in_example = false;
  for (std::string line; std::getline(unit, line);) {
    if (Contains(line, "/etc/ringtrain/train.flags") && Contains(line, "one flag per line")) {
      in_example = true;
      continue;
    }
    if (!in_example) continue;
    const size_t dash = line.find("--");
    if (line.rfind("#", 0) != 0 || dash == std::string::npos) break;
    flags.push_back(line.substr(dash));
  }
  return flags;
}

// Synthetic data: vocab 50, 3 source bytes per token (as train_cli_test).
void WriteData(const std::string& dir) {
  std::vector<uint32_t> train(6000), val(800);
  for (size_t i = 0; i < train.size(); ++i) train[i] = static_cast<uint32_t>((i * 7 + i / 13) % 50);
  for (size_t i = 0; i < val.size(); ++i) val[i] = static_cast<uint32_t>((i * 7 + i / 11) % 50);
  REQUIRE(rt::data::WriteTokenDataset(dir, 50, train, val, train.size() * 3, val.size() * 3).ok());
}

// The unit's example with /etc/ringtrain and /var/lib/ringtrain under `root`, plus
// the files it names: data, a one-line loopback hosts file, a secret. Returns the text.
std::string WriteUnitSetup(const TempDir& root) {
  const std::vector<std::string> flags = UnitExampleFlags();
  std::string text = "# the example of tools/ringtrain.service, paths moved to a temp dir\n";
  for (const std::string& f : flags) {
    text += absl::StrReplaceAll(
                f, {{"/etc/ringtrain", root / "etc"}, {"/var/lib/ringtrain", root / "var"}}) +
            "\n";
  }
  std::filesystem::create_directories(root / "etc");
  WriteData(root / "var/data");
  rt::testing::WriteFile(root / "etc/hosts",
                         "127.0.0.1:" + std::to_string(rt::integration::TestBasePort()) + "\n");
  rt::testing::WriteFile(root / "etc/secret", "0123456789abcdef0123456789abcdef\n");
  chmod((root / "etc/secret").c_str(), 0600);
  rt::testing::WriteFile(root / "etc/train.flags", text);
  return text;
}

}  // namespace

TEST_CASE("flag file: the systemd unit's example train.flags trains through --flagfile") {
  const std::vector<std::string> example = UnitExampleFlags();
  INFO("example flags found: ", example.size());
  REQUIRE(example.size() >= 6);
  // The point of the test: dashed names, as the unit's comment writes them.
  bool dashed = false;
  for (const std::string& f : example) dashed = dashed || Contains(f, "--secret-file=");
  REQUIRE(dashed);

  TempDir root;
  WriteUnitSetup(root);
  rt::integration::ProcessGroup group(root.path());
  // The unit runs `ringtrain train --flagfile=/etc/ringtrain/train.flags`; here a tiny
  // model is added after it (later flags win) so that steps take milliseconds.
  const size_t peer =
      group.Start({RINGTRAIN_BINARY, "train", "--flagfile=" + root / "etc/train.flags",
                   "--layers=2", "--heads=2", "--dim=32", "--seq-len=16", "--batch=4",
                   "--precision=fp32", "--threads=1", "--eval-every=0", "--wait=30"},
                  {"OMP_NUM_THREADS=1"});
  // --metrics=/var/lib/ringtrain/metrics.jsonl with --hosts: each peer writes .rank<R>.
  const bool trained = rt::integration::WaitForLines(root / "var/metrics.rank0.jsonl", 2, 90);
  group.Signal(peer, SIGTERM);
  const std::vector<RunResult> r = group.WaitAll(60);
  INFO("stderr:\n", r[0].err);
  REQUIRE(trained);
  CHECK_FALSE(r[0].timed_out);
  CHECK(r[0].exit_code == 0);
  std::vector<std::string> problems;
  auto ckpt = rt::ckpt::OpenLatestValidCheckpoint(root / "var/ckpt", &problems);
  CHECK_MESSAGE(ckpt.ok(), ckpt.status().message());
}

TEST_CASE("flag file: an unknown or unused flag, or a bad value, is refused naming FILE:LINE") {
  TempDir root;
  const std::string example = WriteUnitSetup(root);
  const std::string file = root / "etc/train.flags";
  // Line numbers: the example's lines, then a blank line and a comment, then the bad line.
  int lines = 0;
  for (char c : example) lines += c == '\n';
  struct Case {
    std::string line, expect;
  };
  const std::vector<Case> cases = {
      {"--prompt=hi", "unknown flag --prompt: ringtrain train does not use it"},
      {"--stepz 3", "unknown flag --stepz (see ringtrain train --help)"},
      {"--heads two", "--heads=two: "},
      {"heads=2", "'heads=2' is not a flag"},
  };
  for (const Case& c : cases) {
    rt::testing::WriteFile(file, example + "\n# added\n" + c.line + "\n");
    RunResult r = RunRingtrain({"train", "--flagfile", file}, root.path(), 60);
    INFO(c.line, " -> ", r.err);
    CHECK(r.exit_code == 2);
    CHECK(Contains(r.err,
                   "ringtrain train: " + file + ":" + std::to_string(lines + 3) + ": " + c.expect));
    CHECK_FALSE(Contains(r.err, "step "));
  }
  // `--heads 2` (with a space) is accepted like `--heads=2`; a value a flag refuses,
  // written on the command line, is refused there without a FILE:LINE.
  rt::testing::WriteFile(file, example + "--heads 2\n--dim=31\n");
  RunResult r = RunRingtrain({"train", "--flagfile=" + file, "--dim", "32", "--layers", "x"},
                             root.path(), 60);
  INFO(r.err);
  CHECK(r.exit_code == 2);
  CHECK(Contains(r.err, "ringtrain train: --layers=x: "));
  // A flag file that does not exist.
  r = RunRingtrain({"train", "--flagfile=" + root / "nope.flags"}, root.path(), 60);
  CHECK(r.exit_code == 2);
  CHECK(Contains(r.err, "--flagfile " + root / "nope.flags: cannot read it"));
}
