// Checkpoints written beside training (train/background_checkpoint.h):
// The writer's results are never dropped, and every checkpoint written while the next
// step computed holds exactly the state of its own step, moments included.
#include "train/background_checkpoint.h"

#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_format.h"
#include "ckpt/checkpoint.h"
#include "train/train_checkpoint.h"
#include "train/train_test_util.h"
#include "train/trainer.h"

namespace {

using rt::train::BackgroundCheckpoint;
using rt::train::StepMetrics;
using rt::train::TrainConfig;
using rt::train::Trainer;
using rt::train::testing::TempDir;
using rt::train::testing::TinyConfig;
using rt::train::testing::WriteMarkovData;

TEST_CASE("background checkpoint: every result is collected once, none is dropped") {
  BackgroundCheckpoint writer;
  CHECK_FALSE(writer.Wait().has_value());
  std::atomic<bool> release{false};
  CHECK_FALSE(writer
                  .Start(3,
                         [&] {
                           while (!release.load()) {
                             std::this_thread::sleep_for(std::chrono::milliseconds(1));
                           }
                           return absl::DataLossError("disk says no");
                         })
                  .has_value());
  CHECK(writer.pending());
  release = true;
  // A second Start waits for the first and hands back its result.
  std::optional<BackgroundCheckpoint::Result> first =
      writer.Start(6, [] { return absl::OkStatus(); });
  REQUIRE(first.has_value());
  CHECK(first->step == 3);
  CHECK(first->status.code() == absl::StatusCode::kDataLoss);
  std::optional<BackgroundCheckpoint::Result> second = writer.Wait();
  REQUIRE(second.has_value());
  CHECK(second->step == 6);
  CHECK(second->status.ok());
  CHECK(second->write_ms >= 0);
  CHECK_FALSE(writer.pending());
  CHECK_FALSE(writer.Wait().has_value());
}

TEST_CASE("checkpoints written beside training hold their own step's state, moments included") {
  rt::train::testing::UseOneThread();
  TempDir dir;
  REQUIRE(WriteMarkovData(dir / "data", 64, 4000, 500).empty());
  TrainConfig c = TinyConfig(dir / "data");
  c.steps = 7;
  c.warmup = 2;

  // The reference: the state after every step, stepped by hand (no checkpoints).
  std::vector<std::vector<float>> params(c.steps + 1), m(c.steps + 1), v(c.steps + 1);
  {
    auto t = *Trainer::Create(c);
    for (int s = 1; s <= c.steps; ++s) {
      StepMetrics sm;
      REQUIRE(t->TrainStep(&sm).ok());
      params[s].assign(t->params().begin(), t->params().end());
      m[s].assign(t->optimizer().m().begin(), t->optimizer().m().end());
      v[s].assign(t->optimizer().v().begin(), t->optimizer().v().end());
    }
  }

  // Every step checkpointed, all kept: steps 1..6 are written in the background while
  // the next step's forward and backward run, step 7 (the last) in place.
  c.ckpt_dir = dir / "ckpt";
  c.ckpt_every = 1;
  c.ckpt_keep = 0;
  c.metrics_path = dir / "m.jsonl";
  auto t = *Trainer::Create(c);
  REQUIRE(t->Run().ok());
  for (int s = 1; s <= c.steps; ++s) {
    CAPTURE(s);
    absl::StatusOr<rt::ckpt::Checkpoint> ck =
        rt::ckpt::Checkpoint::Open(absl::StrFormat("%s/step-%08d", c.ckpt_dir, s));
    REQUIRE(ck.ok());
    REQUIRE(ck->VerifyAllSections().ok());
    for (auto [name, want] : {std::pair{"params", &params[s]}, std::pair{"adam_m", &m[s]},
                              std::pair{"adam_v", &v[s]}}) {
      CAPTURE(name);
      std::vector<float> got(want->size());
      REQUIRE(rt::train::ReadFloatSection(*ck, name, absl::MakeSpan(got)).ok());
      CHECK(std::memcmp(got.data(), want->data(), got.size() * sizeof(float)) == 0);
    }
  }
  // The metrics say how long each step waited for the writer, and the memory in use.
  std::ifstream in(c.metrics_path);
  int lines = 0;
  for (std::string line; std::getline(in, line); ++lines) {
    CHECK(line.find("\"ckpt_wait_ms\":") != std::string::npos);
    CHECK(line.find("\"rss_mb\":") != std::string::npos);
  }
  CHECK(lines == c.steps);
}

}  // namespace
