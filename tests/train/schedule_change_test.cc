// DescribeScheduleChange (train/train_checkpoint.h): resuming under another learning-rate
// schedule than the checkpoint's is named, old -> new, with the rate at the resumed
// step under both; the same schedule, or a checkpoint that records none, says nothing.
#include <doctest/doctest.h>

#include <map>
#include <string>

#include "train/train_checkpoint.h"
#include "train/train_config.h"

namespace {

using rt::train::DescribeScheduleChange;
using rt::train::TrainConfig;

bool Contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

TrainConfig Schedule(int steps, int warmup, float lr, float min_lr) {
  TrainConfig c;
  c.steps = steps;
  c.warmup = warmup;
  c.lr = lr;
  c.min_lr = min_lr;
  return c;
}

// The meta fields a checkpoint of `c` records (TrainMetaFields), schedule only.
std::map<std::string, std::string> Fields(const TrainConfig& c) {
  rt::model::GptConfig shape;
  std::map<std::string, std::string> all = rt::train::TrainMetaFields(c, shape, 8, "fp", 0);
  return {{"optim.steps", all["optim.steps"]},
          {"optim.warmup", all["optim.warmup"]},
          {"optim.lr", all["optim.lr"]},
          {"optim.min_lr", all["optim.min_lr"]}};
}

}  // namespace

TEST_CASE("resume: a changed --steps/--warmup/--lr is named old -> new with the rate at the step") {
  const TrainConfig saved = Schedule(100, 10, 6e-4f, 6e-5f);
  CHECK(DescribeScheduleChange(Fields(saved), saved, 50) == "");

  const std::string longer =
      DescribeScheduleChange(Fields(saved), Schedule(200, 10, 6e-4f, 6e-5f), 50);
  CHECK(Contains(longer, "--steps 100 -> 200"));
  CHECK_FALSE(Contains(longer, "--lr"));
  CHECK_FALSE(Contains(longer, "--warmup"));
  // Step 50 of 100 (warmup 10) is 44% of the way down the cosine; of 200, 21%:
  // 6e-5 + 5.4e-4 * (1 + cos(pi r)) / 2.
  CHECK(Contains(longer, "at step 50 is 0.000543 (the checkpoint's schedule gave 0.000377)"));

  const std::string several =
      DescribeScheduleChange(Fields(saved), Schedule(100, 20, 3e-4f, 6e-5f), 5);
  CHECK(Contains(several, "--warmup 10 -> 20"));
  CHECK(Contains(several, "--lr 0.0006 -> 0.0003"));
  CHECK_FALSE(Contains(several, "--steps"));
  CHECK_FALSE(Contains(several, "--min-lr"));
  CHECK(Contains(several, "at step 5 is 9e-05 (the checkpoint's schedule gave 0.00036)"));

  CHECK(Contains(DescribeScheduleChange(Fields(saved), Schedule(100, 10, 6e-4f, 0), 5),
                 "--min-lr 6e-05 -> 0"));
}

TEST_CASE("resume: a checkpoint that records no schedule (or an unreadable one) says nothing") {
  const TrainConfig run = Schedule(100, 10, 6e-4f, 6e-5f);
  CHECK(DescribeScheduleChange({}, run, 3) == "");
  CHECK(DescribeScheduleChange({{"optim.steps", "many"}}, run, 3) == "");
  // Only what is recorded is compared.
  CHECK(DescribeScheduleChange({{"optim.steps", "50"}}, run, 3).rfind("--steps 50 -> 100", 0) == 0);
}
