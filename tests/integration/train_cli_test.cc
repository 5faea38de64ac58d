// The train / eval / sample subcommands as a user runs them (single peer): a short
// run with metrics and checkpoints, resume equal to an uninterrupted run, SIGTERM
// stopping cleanly with a checkpoint, eval's figures, and bad input giving a clear
// message and a non-zero exit code.
#include <doctest/doctest.h>

#include <signal.h>

#include <cmath>
#include <fstream>
#include <string>
#include <vector>

#include "ckpt/checkpoint.h"
#include "cli_runner.h"
#include "data/token_dataset.h"
#include "process_group.h"

namespace {

using rt::integration::ReadFile;
using rt::integration::RunResult;
using rt::integration::RunRingtrain;
using rt::integration::TempDir;

// Synthetic data: a repeating pattern with noise, vocab 50, 3 source bytes per token.
void WriteData(const std::string& dir, size_t train_n = 6000, size_t val_n = 800) {
  std::vector<uint32_t> train(train_n), val(val_n);
  for (size_t i = 0; i < train_n; ++i) train[i] = static_cast<uint32_t>((i * 7 + i / 13) % 50);
  for (size_t i = 0; i < val_n; ++i) val[i] = static_cast<uint32_t>((i * 7 + i / 11) % 50);
  REQUIRE(rt::data::WriteTokenDataset(dir, 50, train, val, train_n * 3, val_n * 3).ok());
}

std::vector<std::string> TinyModelFlags() {
  return {"--layers=2",       "--heads=2",   "--dim=32",   "--seq-len=16", "--batch=4",
          "--precision=fp32", "--threads=1", "--warmup=0", "--lr=3e-3"};
}

std::vector<std::string> Concat(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// The value of "key":"..." or "key":number in the last line of `jsonl` that has it.
std::string LastField(const std::string& jsonl, const std::string& key) {
  const std::string k = "\"" + key + "\":";
  size_t pos = jsonl.rfind(k);
  if (pos == std::string::npos) return "";
  pos += k.size();
  size_t end = jsonl.find_first_of(",}", pos);
  std::string v = jsonl.substr(pos, end - pos);
  if (!v.empty() && v.front() == '"') v = v.substr(1, v.size() - 2);
  return v;
}

bool Contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

}  // namespace

TEST_CASE("train writes step lines, metrics and a checkpoint -- eval reads them back") {
  TempDir dir;
  WriteData(dir / "data");
  RunResult r = RunRingtrain(
      Concat({"train", "--data", dir / "data", "--steps=12", "--eval-every=6", "--eval-batches=2",
              "--ckpt-dir", dir / "ckpt", "--metrics", dir / "m.jsonl"},
             TinyModelFlags()),
      dir.path());
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  CHECK(Contains(r.out, "step    12/12 | loss"));
  CHECK(Contains(r.out, "val_bpb"));
  const std::string metrics = ReadFile(dir / "m.jsonl");
  CHECK(LastField(metrics, "step") == "12");
  CHECK(LastField(metrics, "tokens") == "768");  // 12 steps x 4 sequences x 16 tokens
  const double first_val = std::stod(metrics.substr(metrics.find("\"val_loss\":") + 11));
  const double last_val = std::stod(LastField(metrics, "val_loss"));
  CHECK(last_val < first_val);
  CHECK(std::filesystem::exists(dir / "ckpt/step-00000012/manifest.txt"));

  RunResult e = RunRingtrain(
      {"eval", "--ckpt", dir / "ckpt", "--data", dir / "data", "--precision=fp32", "--batch=4"},
      dir.path());
  INFO(e.err);
  REQUIRE(e.exit_code == 0);
  CHECK(Contains(e.out, "perplexity"));
  const double eval_loss = std::stod(LastField(e.out, "val_loss"));
  const double eval_bpb = std::stod(LastField(e.out, "val_bpb"));
  CHECK(eval_bpb == doctest::Approx(eval_loss / std::log(2.0) / 3.0).epsilon(1e-4));
  CHECK(LastField(e.out, "tokens") == "784");  // 49 windows of 16 in 800 val tokens

  // Synthetic data has no tokenizer: sample says so instead of printing garbage.
  RunResult s = RunRingtrain({"sample", "--ckpt", dir / "ckpt", "--prompt", "x"}, dir.path());
  CHECK(s.exit_code != 0);
  CHECK(Contains(s.err, "no tokenizer"));
}

TEST_CASE("train 4 steps + resume (the default) to 8 equals 8 steps (param_hash)") {
  TempDir dir;
  WriteData(dir / "data");
  // A constant learning rate (min-lr = lr) makes the schedule independent of --steps.
  auto flags = Concat({"train", "--data", dir / "data", "--min-lr=3e-3"}, TinyModelFlags());
  RunResult whole =
      RunRingtrain(Concat(flags, {"--steps=8", "--metrics", dir / "whole.jsonl"}), dir.path());
  REQUIRE(whole.exit_code == 0);
  RunResult first = RunRingtrain(
      Concat(flags, {"--steps=4", "--ckpt-dir", dir / "ckpt", "--metrics", dir / "part.jsonl"}),
      dir.path());
  REQUIRE(first.exit_code == 0);
  // --resume=false refuses a directory that holds a checkpoint, and changes nothing.
  RunResult refused = RunRingtrain(
      Concat(flags, {"--steps=8", "--ckpt-dir", dir / "ckpt", "--resume=false"}), dir.path());
  CHECK(refused.exit_code == 1);
  CHECK(Contains(refused.err, "--resume=false"));
  // Without a flag, training continues from the checkpoint.
  RunResult second = RunRingtrain(
      Concat(flags, {"--steps=8", "--ckpt-dir", dir / "ckpt", "--metrics", dir / "part.jsonl"}),
      dir.path());
  INFO(second.err);
  REQUIRE(second.exit_code == 0);
  CHECK(Contains(second.err, "resumed from"));
  // --steps 4 -> 8 is another schedule than the checkpoint's (its rate is constant here).
  CHECK(Contains(second.err, "trained under another learning-rate schedule: --steps 4 -> 8"));
  const std::string a = ReadFile(dir / "whole.jsonl"), b = ReadFile(dir / "part.jsonl");
  CHECK(LastField(b, "step") == "8");
  CHECK(LastField(a, "param_hash") == LastField(b, "param_hash"));
  CHECK(LastField(a, "loss") == LastField(b, "loss"));
}

TEST_CASE("train alone: SIGTERM stops after the step in flight with a checkpoint, exit 0") {
  TempDir tmp;
  WriteData(tmp / "data");
  rt::integration::ProcessGroup group(tmp.path());
  const size_t peer = group.Start(
      Concat({RINGTRAIN_BINARY, "train", "--data", tmp / "data", "--steps=1000000", "--metrics",
              tmp / "m.jsonl", "--ckpt-dir", tmp / "ckpt", "--ckpt-every=0", "--eval-every=0"},
             TinyModelFlags()),
      {"OMP_NUM_THREADS=1"});
  REQUIRE(rt::integration::WaitForLines(tmp / "m.jsonl", 5));
  group.Signal(peer, SIGTERM);
  const std::vector<RunResult> r = group.WaitAll(60);
  INFO("stderr:\n", r[0].err);
  CHECK_FALSE(r[0].timed_out);
  CHECK(r[0].exit_code == 0);
  CHECK(Contains(r[0].err, "stopped cleanly after step"));
  // The checkpoint (the only one: --ckpt-every=0) is of the last step in the metrics.
  const std::string last_step = LastField(ReadFile(tmp / "m.jsonl"), "step");
  REQUIRE(!last_step.empty());
  std::vector<std::string> problems;
  auto ckpt = rt::ckpt::OpenLatestValidCheckpoint(tmp / "ckpt", &problems);
  REQUIRE_MESSAGE(ckpt.ok(), ckpt.status().message());
  CHECK(std::to_string(ckpt->meta().step) == last_step);
}

TEST_CASE("bad input: a clear message and a non-zero exit code") {
  TempDir dir;
  WriteData(dir / "data");
  auto train = [&](std::vector<std::string> extra) {
    return RunRingtrain(Concat(Concat({"train", "--steps=2"}, TinyModelFlags()), extra),
                        dir.path());
  };
  struct Case {
    const char* what;
    std::vector<std::string> args;
    const char* expect;
  };
  std::filesystem::create_directories(dir / "garbage");
  { std::ofstream(dir / "garbage/manifest.txt") << "this is not a manifest\n"; }
  const std::vector<Case> cases = {
      {"no --data", {}, "--data is required"},
      {"missing data dir", {"--data", dir / "nope"}, "nope"},
      {"malformed data dir", {"--data", dir / "garbage"}, "garbage"},
      {"dim not divisible by heads",
       {"--data", dir / "data", "--dim=30", "--heads=4"},
       "not divisible"},
      {"bad precision", {"--data", dir / "data", "--precision=fp8"}, "fp8"},
      {"seq_len longer than the data",
       {"--data", dir / "data", "--seq-len=10000"},
       "fewer than one window"},
      {"unknown flag", {"--data", dir / "data", "--stepz=3"}, "unknown flag --stepz"},
      {"--zero 1 alone", {"--data", dir / "data", "--zero=1"}, "--zero needs --hosts (a ring)"},
  };
  for (const Case& c : cases) {
    RunResult r = train(c.args);
    INFO(c.what << ": " << r.err);
    CHECK(r.exit_code > 0);
    CHECK(Contains(r.err, c.expect));
    CHECK_FALSE(r.timed_out);
  }

  // --zero 1 on a ring with a top-k (or automatic) codec: refused before any peer is
  // contacted, with exit 1 (a hosts file of two peers that never start).
  { std::ofstream(dir / "hosts") << "127.0.0.1:1\n127.0.0.1:2\n"; }
  for (const char* compress : {"--compress=topk:0.01", "--compress=auto"}) {
    RunResult r = train({"--data", dir / "data", "--hosts", dir / "hosts", "--rank=0", "--zero=1",
                         compress, "--wait=5"});
    INFO(compress << ": " << r.err);
    CHECK(r.exit_code == 1);
    CHECK(Contains(r.err,
                   "--zero 1 works with --compress none or bf16: a top-k sum is not "
                   "reduce-scattered"));
    CHECK_FALSE(r.timed_out);
  }
  // The same ring flags alone are usage errors (exit 2), each naming the flag.
  for (const char* flag : {"--zero=1", "--compress=topk:0.01"}) {
    RunResult r = train({"--data", dir / "data", flag});
    INFO(flag << ": " << r.err);
    CHECK(r.exit_code == 2);
    CHECK(Contains(r.err, "needs --hosts (a ring); without it train runs alone"));
  }

  // A checkpoint from another model: refused, naming the difference.
  REQUIRE(train({"--data", dir / "data", "--ckpt-dir", dir / "ckpt"}).exit_code == 0);
  RunResult other = train(
      {"--data", dir / "data", "--ckpt-dir", dir / "ckpt", "--resume", "--steps=4", "--layers=3"});
  CHECK(other.exit_code > 0);
  CHECK(Contains(other.err, "layers=2"));
  CHECK(Contains(other.err, "layers=3"));
  RunResult longer = train({"--data", dir / "data", "--ckpt-dir", dir / "ckpt", "--resume",
                            "--steps=4", "--seq-len=32"});
  CHECK(longer.exit_code > 0);
  CHECK(Contains(longer.err, "position table"));

  // eval: a checkpoint and data with different vocabularies.
  std::vector<uint32_t> t(500, 1), v(100, 2);
  REQUIRE(rt::data::WriteTokenDataset(dir / "data64", 64, t, v, 500, 100).ok());
  RunResult e =
      RunRingtrain({"eval", "--ckpt", dir / "ckpt", "--data", dir / "data64"}, dir.path());
  CHECK(e.exit_code > 0);
  CHECK(Contains(e.err, "vocab 50"));
  RunResult no_ckpt = RunRingtrain({"sample", "--ckpt", dir / "none", "--prompt", "a"}, dir.path());
  CHECK(no_ckpt.exit_code > 0);
  CHECK(Contains(no_ckpt.err, "none"));
}

TEST_CASE(
    "prepare -> train -> sample continues a Vietnamese prompt with the checkpoint's tokenizer") {
  TempDir dir;
  {
    std::ofstream text(dir / "vi.txt");
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
  RunResult prep = RunRingtrain({"prepare", "--input", dir / "vi.txt", "--out", dir / "data",
                                 "--vocab-size=320", "--val-fraction=0.1", "--threads=1"},
                                dir.path());
  INFO(prep.err);
  REQUIRE(prep.exit_code == 0);
  RunResult tr = RunRingtrain(Concat({"train", "--data", dir / "data", "--steps=30", "--ckpt-dir",
                                      dir / "ckpt", "--eval-every=0"},
                                     TinyModelFlags()),
                              dir.path());
  INFO(tr.err);
  REQUIRE(tr.exit_code == 0);
  RunResult s1 = RunRingtrain({"sample", "--ckpt", dir / "ckpt", "--prompt", "Xin chào",
                               "--tokens=20", "--seed=5", "--precision=fp32"},
                              dir.path());
  INFO(s1.err);
  REQUIRE(s1.exit_code == 0);
  CHECK(s1.out.rfind("Xin chào", 0) == 0);  // the prompt, then the continuation
  CHECK(s1.out.size() > std::string("Xin chào\n").size());
  RunResult s2 = RunRingtrain({"sample", "--ckpt", dir / "ckpt/step-00000030", "--prompt",
                               "Xin chào", "--tokens=20", "--seed=5", "--precision=fp32"},
                              dir.path());
  CHECK(s2.out == s1.out);  // same seed, same text; a step directory works too
  RunResult e = RunRingtrain({"eval", "--ckpt", dir / "ckpt", "--data", dir / "data"}, dir.path());
  INFO(e.err);
  CHECK(e.exit_code == 0);
  CHECK(Contains(e.out, "val_bpb"));
}
