// Training-level behaviour of Trainer: accumulation equals a bigger batch, a tiny
// model memorises a short text, bf16 tracks fp32, resume is bit-exact, runs are
// reproducible, metrics lines are complete, bad configurations are refused, failed
// checkpoint writes are survived.
#include "train/trainer.h"

#include <doctest/doctest.h>
#include <sys/resource.h>

#include <algorithm>
#include <cmath>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <string>
#include <vector>

#include "bf16_paths.h"
#include "ckpt/checkpoint.h"
#include "train/train_test_util.h"

namespace {

using rt::train::StepMetrics;
using rt::train::TrainConfig;
using rt::train::Trainer;
using rt::train::testing::TempDir;
using rt::train::testing::TinyConfig;
using rt::train::testing::WriteMarkovData;

std::unique_ptr<Trainer> MakeTrainer(const TrainConfig& c) {
  auto t = Trainer::Create(c);
  REQUIRE_MESSAGE(t.ok(), t.status().message());
  return std::move(*t);
}

double MaxAbs(absl::Span<const float> x) {
  double m = 0;
  for (float f : x) m = std::max(m, static_cast<double>(std::fabs(f)));
  return m;
}

}  // namespace

TEST_CASE("accum 4 with batch B gives the gradient of batch 4B in one step") {
  rt::train::testing::UseOneThread();
  TempDir dir;
  REQUIRE(WriteMarkovData(dir.path(), 64, 4000, 500).empty());
  TrainConfig big = TinyConfig(dir.path());
  big.batch = 8;
  big.accum = 1;
  TrainConfig small = big;
  small.batch = 2;
  small.accum = 4;
  auto a = MakeTrainer(big);
  auto b = MakeTrainer(small);
  REQUIRE(a->slots() == b->slots());  // same global batch => same windows
  for (int step = 0; step < 3; ++step) {
    StepMetrics ma, mb;
    REQUIRE(a->TrainStep(&ma).ok());
    REQUIRE(b->TrainStep(&mb).ok());
    CHECK(ma.loss == doctest::Approx(mb.loss).epsilon(1e-5));
    // Same data, only the summation order differs: relative to the largest gradient
    // entry the difference is at float rounding level.
    double max_diff = 0;
    for (size_t i = 0; i < a->grads().size(); ++i) {
      max_diff = std::max(max_diff, static_cast<double>(std::fabs(a->grads()[i] - b->grads()[i])));
    }
    CHECK(max_diff / MaxAbs(a->grads()) < 1e-4);
  }
}

TEST_CASE("a tiny model memorises a short text (loss < 0.1)") {
  rt::train::testing::UseOneThread();
  TempDir dir;
  // A 48-token text where each token determines the next, repeated; vocab 48.
  std::vector<uint32_t> text(48);
  std::iota(text.begin(), text.end(), 0);
  for (size_t i = 0; i < text.size(); ++i) std::swap(text[i], text[(i * 17 + 5) % text.size()]);
  std::vector<uint32_t> train, val;
  for (int r = 0; r < 8; ++r) train.insert(train.end(), text.begin(), text.end());
  val = train;
  REQUIRE(rt::data::WriteTokenDataset(dir.path(), 48, train, val, 1000, 1000).ok());
  TrainConfig c = TinyConfig(dir.path());
  c.lr = 1e-2f;
  c.min_lr = 1e-3f;
  c.warmup = 10;
  c.steps = 150;
  c.batch = 8;
  c.adamw.weight_decay = 0.0f;
  auto t = MakeTrainer(c);
  double last_loss = 1e9;
  while (t->step() < c.steps) {
    StepMetrics m;
    REQUIRE(t->TrainStep(&m).ok());
    last_loss = m.loss;
  }
  CHECK(last_loss < 0.1);
  CHECK(t->Evaluate().loss < 0.1);
}

TEST_CASE("bf16 loss is within 2% of fp32 after 100 steps") {
  rt::train::testing::UseOneThread();
  TempDir dir;
  REQUIRE(WriteMarkovData(dir.path(), 64, 20000, 2000).empty());
  TrainConfig c = TinyConfig(dir.path());
  c.steps = 100;
  c.model.dim = 64;
  c.model.n_heads = 4;
  c.eval_every = 100;
  if (!rt::testing::Bf16MatmulsRun()) {
    // AVX2 and below: oneDNN has no bf16 matmul, and the trainer must refuse bf16 clearly.
    c.precision = rt::model::Precision::kBf16;
    auto t = Trainer::Create(c);
    REQUIRE_FALSE(t.ok());
    rt::testing::CheckBf16Refusal(t.status());
    MESSAGE("bf16 is not available here: checked the refusal instead of bf16 training");
    return;
  }
  double val_loss[2];
  std::vector<float> params[2];
  for (int i = 0; i < 2; ++i) {
    c.precision = i == 0 ? rt::model::Precision::kFp32 : rt::model::Precision::kBf16;
    auto t = MakeTrainer(c);
    while (t->step() < c.steps) {
      StepMetrics m;
      REQUIRE(t->TrainStep(&m).ok());
    }
    val_loss[i] = t->Evaluate().loss;
    params[i].assign(t->params().begin(), t->params().end());
  }
  CHECK(params[0] != params[1]);  // bf16 really rounded the matmul inputs
  MESSAGE("fp32 val loss " << val_loss[0] << ", bf16 " << val_loss[1]);
  CHECK(val_loss[0] < std::log(64.0) * 0.6);  // it learned something
  CHECK(std::fabs(val_loss[1] - val_loss[0]) / val_loss[0] < 0.02);
}

TEST_CASE("N steps + checkpoint + resume + N steps equals 2N steps, bit for bit") {
  rt::train::testing::UseOneThread();
  TempDir dir;
  REQUIRE(WriteMarkovData(dir / "data", 64, 4000, 500).empty());
  TrainConfig c = TinyConfig(dir / "data");
  c.steps = 8;
  c.warmup = 3;

  auto straight = MakeTrainer(c);
  REQUIRE(straight->Run().ok());

  c.ckpt_dir = dir / "ckpt";
  {
    auto first = MakeTrainer(c);
    for (int i = 0; i < 4; ++i) {
      StepMetrics m;
      REQUIRE(first->TrainStep(&m).ok());
    }
    REQUIRE(first->SaveCheckpoint().ok());
  }
  c.resume = true;
  auto second = MakeTrainer(c);
  CHECK(second->resumed());
  CHECK(second->step() == 4);
  REQUIRE(second->Run().ok());
  CHECK(second->step() == 8);
  REQUIRE(second->params().size() == straight->params().size());
  CHECK(std::equal(second->params().begin(), second->params().end(), straight->params().begin()));

  SUBCASE("a checkpoint of another model is refused with the difference named") {
    TrainConfig other = c;
    other.model.dim = 48;
    auto t = Trainer::Create(other);
    REQUIRE_FALSE(t.ok());
    std::string msg(t.status().message());
    CHECK(msg.find("dim=32") != std::string::npos);
    CHECK(msg.find("dim=48") != std::string::npos);
  }
  SUBCASE("a longer seq_len than the checkpoint's position table is refused") {
    TrainConfig other = c;
    other.model.seq_len = 32;
    auto t = Trainer::Create(other);
    REQUIRE_FALSE(t.ok());
    CHECK(std::string(t.status().message()).find("position table") != std::string::npos);
  }
  SUBCASE("without --resume an existing checkpoint is not overwritten") {
    TrainConfig other = c;
    other.resume = false;
    auto t = Trainer::Create(other);
    REQUIRE_FALSE(t.ok());
    CHECK(std::string(t.status().message()).find("--resume") != std::string::npos);
  }
}

TEST_CASE("the same seed gives the same run -- another seed does not") {
  rt::train::testing::UseOneThread();
  TempDir dir;
  REQUIRE(WriteMarkovData(dir.path(), 64, 4000, 500).empty());
  TrainConfig c = TinyConfig(dir.path());
  c.steps = 3;
  auto a = MakeTrainer(c);
  auto b = MakeTrainer(c);
  c.seed = 8;
  auto other = MakeTrainer(c);
  REQUIRE(a->Run().ok());
  REQUIRE(b->Run().ok());
  REQUIRE(other->Run().ok());
  CHECK(std::equal(a->params().begin(), a->params().end(), b->params().begin()));
  CHECK_FALSE(std::equal(a->params().begin(), a->params().end(), other->params().begin()));
}

TEST_CASE("metrics: one complete JSON line per step, eval lines carry val_loss and val_bpb") {
  rt::train::testing::UseOneThread();
  TempDir dir;
  REQUIRE(WriteMarkovData(dir / "data", 64, 4000, 500).empty());
  TrainConfig c = TinyConfig(dir / "data");
  c.steps = 4;
  c.eval_every = 2;
  c.eval_batches = 2;
  c.metrics_path = dir / "m.jsonl";
  auto t = MakeTrainer(c);
  REQUIRE(t->Run().ok());
  std::ifstream in(c.metrics_path);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  REQUIRE(lines.size() == 5);  // untrained eval (step 0) + 4 steps
  for (size_t i = 0; i < lines.size(); ++i) {
    const std::string& l = lines[i];
    CHECK(l.front() == '{');
    CHECK(l.back() == '}');
    for (const char* key : {"\"step\":", "\"loss\":", "\"lr\":", "\"tokens\":", "\"tokens_per_s\":",
                            "\"step_ms\":", "\"compute_ms\":", "\"comm_ms\":", "\"bytes_sent\":",
                            "\"peers\":1", "\"epoch\":0", "\"leader\":0", "\"param_hash\":\""}) {
      CHECK_MESSAGE(l.find(key) != std::string::npos, key << " missing in " << l);
    }
    CHECK(l.find("\"step\":" + std::to_string(i) + ",") != std::string::npos);
    const bool eval_line = i == 0 || i == 2 || i == 4;
    CHECK((l.find("\"val_loss\":") != std::string::npos) == eval_line);
    CHECK((l.find("\"val_bpb\":") != std::string::npos) == eval_line);
  }
  // 4 steps x 4 sequences x 16 tokens.
  CHECK(lines[4].find("\"tokens\":256,") != std::string::npos);
}

TEST_CASE("val_bpb is val_loss / ln 2 * tokens / source bytes") {
  rt::train::testing::UseOneThread();
  TempDir dir;
  REQUIRE(WriteMarkovData(dir.path(), 64, 4000, 500).empty());  // 4 source bytes per token
  TrainConfig c = TinyConfig(dir.path());
  c.eval_every = 1;
  auto t = MakeTrainer(c);
  rt::train::EvalResult e = t->Evaluate();
  CHECK(e.loss == doctest::Approx(std::log(64.0)).epsilon(0.1));  // untrained: ~uniform
  CHECK(e.bpb == doctest::Approx(e.loss / std::log(2.0) / 4.0));
}

TEST_CASE("bad configurations are refused with a message naming the problem") {
  rt::train::testing::UseOneThread();
  TempDir dir;
  REQUIRE(WriteMarkovData(dir / "data", 64, 100, 10).empty());
  auto error_of = [](const TrainConfig& c) {
    auto t = Trainer::Create(c);
    return t.ok() ? std::string("OK") : std::string(t.status().message());
  };
  TrainConfig c = TinyConfig(dir / "data");
  CHECK(error_of(c) == "OK");
  TrainConfig bad = c;
  bad.model.dim = 30;
  bad.model.n_heads = 4;
  CHECK(error_of(bad).find("not divisible") != std::string::npos);
  bad = c;
  bad.data_dir = dir / "nope";
  CHECK(error_of(bad).find(dir / "nope") != std::string::npos);
  bad = c;
  bad.model.seq_len = 128;  // longer than the 100-token train split
  CHECK(error_of(bad).find("100 tokens") != std::string::npos);
  bad = c;
  bad.eval_every = 10;  // val has 10 tokens: no window of 17
  CHECK(error_of(bad).find("--eval-every 0") != std::string::npos);
  bad = c;
  bad.batch = 0;
  CHECK(error_of(bad).find("--batch") != std::string::npos);
  bad = c;
  bad.resume = true;
  CHECK(error_of(bad).find("--resume needs --ckpt-dir") != std::string::npos);
}

TEST_CASE("failed checkpoint writes do not stop training -- only the final one is an error") {
  rt::train::testing::UseOneThread();
  TempDir dir;
  REQUIRE(WriteMarkovData(dir / "data", 64, 4000, 500).empty());
  TrainConfig c = TinyConfig(dir / "data");
  c.steps = 12;
  c.ckpt_dir = dir / "ckpt";
  c.ckpt_every = 3;
  c.metrics_path = dir / "m.jsonl";
  auto t = MakeTrainer(c);
  // RLIMIT_FSIZE makes write(2) fail past 64 KiB (EFBIG), where a full disk fails with
  // ENOSPC: params.bin (~110 KB) cannot be written, the metrics file (~10 KB) can.
  // SIGXFSZ would kill the process: ignored meanwhile.
  struct rlimit old_limit;
  REQUIRE(getrlimit(RLIMIT_FSIZE, &old_limit) == 0);
  auto old_handler = std::signal(SIGXFSZ, SIG_IGN);
  struct rlimit small = old_limit;
  small.rlim_cur = 64 * 1024;
  REQUIRE(setrlimit(RLIMIT_FSIZE, &small) == 0);
  const absl::Status st = t->Run();
  setrlimit(RLIMIT_FSIZE, &old_limit);
  std::signal(SIGXFSZ, old_handler);

  CHECK(t->step() == 12);  // every step trained despite three failed checkpoints
  REQUIRE_FALSE(st.ok());
  const std::string msg(st.message());
  CHECK_MESSAGE(msg.find("training stopped at step 12, but its checkpoint could not be written") !=
                    std::string::npos,
                msg);
  CHECK_MESSAGE(msg.find("params.bin") != std::string::npos, msg);
  CHECK_MESSAGE(msg.find(": none)") != std::string::npos, msg);  // no good checkpoint yet
  std::ifstream in(c.metrics_path);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  REQUIRE(lines.size() == 12);
  CHECK(lines[2].find("\"ckpt_failures\":0") != std::string::npos);   // step 3: none yet
  CHECK(lines[3].find("\"ckpt_failures\":1") != std::string::npos);   // after step 3's
  CHECK(lines[11].find("\"ckpt_failures\":3") != std::string::npos);  // steps 3, 6, 9
  // Nothing half-written is left, and a run with a working disk writes normally.
  CHECK(absl::IsNotFound(rt::ckpt::OpenLatestValidCheckpoint(c.ckpt_dir, nullptr).status()));
  for (const auto& e : std::filesystem::directory_iterator(c.ckpt_dir)) {
    CHECK_MESSAGE(false, "left behind: " << e.path());
  }
  REQUIRE(t->SaveCheckpoint().ok());
  CHECK(rt::ckpt::OpenLatestValidCheckpoint(c.ckpt_dir, nullptr)->meta().step == 12);
}
