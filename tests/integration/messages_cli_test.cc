// Honest messages from the commands a README reader runs:
// eval and sample warn about every invalid checkpoint newer than the one they use and
// give a damaged step directory's reason once; prepare says when the vocabulary is
// smaller than asked and prints no made-up rate; `ringtrain` without a command fails
// with its usage; bench's help and codec answers say what bench does; a malformed
// RINGTRAIN_TEST_* variable is refused when the binary starts.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "cli_runner.h"
#include "data/token_dataset.h"
#include "process_group.h"

namespace {

using rt::integration::RunResult;
using rt::integration::RunRingtrain;
using rt::integration::TempDir;

bool Contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

size_t Count(const std::string& s, const std::string& part) {
  size_t n = 0;
  for (size_t pos = s.find(part); pos != std::string::npos; pos = s.find(part, pos + 1)) ++n;
  return n;
}

// A few kB of Vietnamese text: too little for 2000 BPE pieces.
void WriteCorpus(const std::string& path) {
  std::ofstream text(path);
  const char* paragraphs[] = {
      "Hà Nội là thủ đô của nước Cộng hòa Xã hội chủ nghĩa Việt Nam.",
      "Thành phố Hồ Chí Minh là thành phố đông dân nhất Việt Nam.",
      "Sông Mê Kông chảy qua sáu quốc gia trước khi đổ ra Biển Đông.",
      "Xin chào, tôi đang học tiếng Việt và rất thích đọc sách.",
  };
  for (int r = 0; r < 60; ++r) {
    for (const char* p : paragraphs) text << p << "\n\n";
  }
}

}  // namespace

TEST_CASE(
    "prepare on a small corpus says the real vocabulary -- eval and sample skip bad "
    "checkpoints out loud") {
  TempDir dir;
  WriteCorpus(dir / "vi.txt");
  RunResult prep = RunRingtrain({"prepare", "--input", dir / "vi.txt", "--out", dir / "data",
                                 "--vocab-size=2000", "--val-fraction=0.1", "--threads=1"},
                                dir.path());
  INFO(prep.out, prep.err);
  REQUIRE(prep.exit_code == 0);
  CHECK(Contains(prep.out, "--vocab-size 2000 asked for more pieces than this"));
  // Not a terminal: plain progress lines, without a rate or ETA before one is measured.
  CHECK(Contains(prep.err, "prepare: "));
  CHECK_FALSE(Contains(prep.err, " 0.00 MB/s"));
  CHECK_FALSE(Contains(prep.err, "ETA 0 s"));

  RunResult tr =
      RunRingtrain({"train", "--data", dir / "data", "--steps=6", "--ckpt-dir", dir / "ckpt",
                    "--ckpt-every=2", "--keep=0", "--eval-every=0", "--layers=2", "--heads=2",
                    "--dim=32", "--seq-len=16", "--batch=4", "--precision=fp32", "--threads=1"},
                   dir.path());
  INFO(tr.err);
  REQUIRE(tr.exit_code == 0);
  // Two newer checkpoints damaged: step 4 truncated, step 6 with a flipped byte.
  std::filesystem::resize_file(dir / "ckpt/step-00000004/params.bin", 1000);
  {
    std::fstream f(dir / "ckpt/step-00000006/params.bin",
                   std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(100);
    f.put('\x5a');
  }
  RunResult e = RunRingtrain({"eval", "--ckpt", dir / "ckpt", "--data", dir / "data"}, dir.path());
  INFO(e.err);
  CHECK(e.exit_code == 0);
  CHECK(Contains(e.out, "step-00000002"));
  CHECK(Contains(e.err, "skipping invalid checkpoint: step-00000004: params.bin"));
  CHECK(Contains(e.err, "skipping invalid checkpoint: step-00000006: params.bin"));
  RunResult s = RunRingtrain(
      {"sample", "--ckpt", dir / "ckpt", "--prompt", "Xin chào", "--tokens=5"}, dir.path());
  INFO(s.err);
  CHECK(s.exit_code == 0);
  CHECK(Contains(s.err, "skipping invalid checkpoint: step-00000004: params.bin"));
  CHECK(Contains(s.err, "skipping invalid checkpoint: step-00000006: params.bin"));
  // A damaged step directory given directly: an error, its reason said once.
  RunResult bad = RunRingtrain(
      {"eval", "--ckpt", dir / "ckpt/step-00000004", "--data", dir / "data"}, dir.path());
  INFO(bad.err);
  CHECK(bad.exit_code == 1);
  CHECK(Count(bad.err, "params.bin truncated") == 1);
}

TEST_CASE("ringtrain without a command fails with its usage -- bench says what it does") {
  TempDir dir;
  RunResult none = RunRingtrain({}, dir.path());
  CHECK(none.exit_code == 2);
  CHECK(Contains(none.err, "usage: ringtrain <command>"));
  RunResult help = RunRingtrain({"--help"}, dir.path());
  CHECK(help.exit_code == 0);
  CHECK(Contains(help.out, "usage: ringtrain <command>"));

  RunResult bench_help = RunRingtrain({"bench", "--help"}, dir.path());
  CHECK(bench_help.exit_code == 0);
  CHECK(Contains(bench_help.out, "--steps (default: 5)"));
  RunResult codec =
      RunRingtrain({"bench", "codec", "--compress", "auto", "--size", "1M"}, dir.path());
  CHECK(codec.exit_code == 2);
  CHECK(Contains(codec.err, "--compress auto chooses a codec per bucket"));
}

TEST_CASE("a short --wait with a host absent: the first view forms with those present") {
  // The first view waits min(10 s, --wait / 2) for every host; with --wait 10 and one
  // of two hosts down, --min-peers 1 must still train (it used to give up at 10 s).
  TempDir dir;
  std::vector<uint32_t> train(6000), val(800);
  for (size_t i = 0; i < train.size(); ++i) train[i] = static_cast<uint32_t>((i * 7) % 50);
  for (size_t i = 0; i < val.size(); ++i) val[i] = static_cast<uint32_t>((i * 3) % 50);
  REQUIRE(
      rt::data::WriteTokenDataset(dir / "data", 50, train, val, train.size() * 3, val.size() * 3)
          .ok());
  const int port = rt::integration::TestBasePort();
  rt::testing::WriteFile(dir / "hosts", "127.0.0.1:" + std::to_string(port) +
                                            "\n127.0.0.1:" + std::to_string(port + 1) + "\n");
  RunResult r = RunRingtrain(
      {"train", "--data", dir / "data", "--hosts", dir / "hosts", "--rank=0", "--min-peers=1",
       "--wait=10", "--steps=2", "--eval-every=0", "--layers=2", "--heads=2", "--dim=32",
       "--seq-len=16", "--batch=4", "--precision=fp32", "--threads=1"},
      dir.path(), 60);
  INFO(r.err);
  CHECK(r.exit_code == 0);
  CHECK(Contains(r.out, " 2/2 | loss"));
}

TEST_CASE("a malformed test-hook variable is refused at start-up, naming it and its value") {
  // Read by the data server only once it serves: without the start-up check a fetch
  // test would run unpaused. `plan` reaches no hook at all.
  TempDir dir;
  const rt::integration::RunResult r =
      rt::integration::RunCommand({RINGTRAIN_BINARY, "plan", "--peers=2"}, dir.path(), 30,
                                  {"RINGTRAIN_TEST_SERVE_PAUSE_MS=150ms"});
  INFO(r.err);
  CHECK(r.exit_code == 2);
  CHECK(Contains(r.err, "RINGTRAIN_TEST_SERVE_PAUSE_MS='150ms'"));
}
