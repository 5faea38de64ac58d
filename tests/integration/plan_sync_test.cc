// `ringtrain plan` without --outer-every compares per-step sync with round sync for the
// given link (train/sync_choice.h): the 1B model on eight 100 Mbit/s VPSes gets round
// sync at >= 95% of its compute-only tokens/s, with per-step rows (top-k's warm-up
// counted, the accumulation that would hide the exchange) beside it; a small model on a
// fast link gets per-step sync. With --outer-every the comparison is not printed, and
// --train-tokens prices the run at round sync's rate.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "cli_runner.h"
#include "process_group.h"

namespace {

using rt::integration::JsonField;
using rt::integration::NonEmptyLines;
using rt::integration::RunResult;
using rt::integration::TempDir;

bool Contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

RunResult Plan(const TempDir& tmp, std::vector<std::string> args) {
  args.insert(args.begin(), "plan");
  return rt::integration::RunRingtrain(args, tmp.path(), 60);
}

// The row of the JSON array "sync_options" whose flags are `flags` ("" if none).
std::string Row(const std::string& json, const std::string& flags) {
  const size_t at = json.find("\"flags\":\"" + flags + "\"");
  if (at == std::string::npos) return "";
  const size_t begin = json.rfind('{', at), end = json.find('}', at);
  return json.substr(begin, end - begin + 1);
}

}  // namespace

TEST_CASE("plan: per-step against round sync -- round sync for 1B at 100 Mbit/s") {
  TempDir tmp;
  const RunResult r = Plan(
      tmp, {"--layers=20", "--heads=16", "--dim=2048", "--seq-len=1024", "--batch=1",
            "--precision=bf16", "--recompute", "--peers=8", "--gflops=400", "--link-mbps=100"});
  INFO(r.out, r.err);
  REQUIRE(r.exit_code == 0);
  CHECK(Contains(r.out, "per-step sync against round sync on this link"));
  const std::string json = NonEmptyLines(r.out).back();
  // Every kind of row is there: per-step codecs, top-k with its warm-up, accumulation
  // (neither none nor bf16 hides at this speed), and round sync.
  for (const char* flags : {"--compress none", "--compress bf16", "--compress topk:0.01"}) {
    CHECK_MESSAGE(!Row(json, flags).empty(), flags);
  }
  CHECK(Contains(r.out, "topk:0.01 (warm-up: 10% dense, 10% ramp)"));
  // Top-k's warm-up sends the fp32 gradient for a tenth of the steps: no top-k row can
  // beat ten times the dense row (it could when the warm-up was priced as bf16).
  const double dense_rate = std::stod(JsonField(Row(json, "--compress none"), "tokens_per_s"));
  for (const char* topk : {"--compress topk:0.01", "--compress topk:0.003"}) {
    CHECK_MESSAGE(std::stod(JsonField(Row(json, topk), "tokens_per_s")) <= 10 * dense_rate, topk);
  }
  CHECK(Contains(json, "\"kind\":\"accumulate\""));
  CHECK(Contains(json, "\"kind\":\"round\""));
  // Per-step sync is communication-bound here, even top-k once its warm-up is counted.
  CHECK(std::stod(JsonField(Row(json, "--compress bf16"), "of_compute")) < 0.1);
  CHECK(std::stod(JsonField(Row(json, "--compress topk:0.003"), "of_compute")) < 0.5);
  // The suggestion: round sync, >= 95% of compute only, and it fits 32 GB.
  const std::string suggested = JsonField(json, "suggested_sync");
  REQUIRE(suggested.rfind("--outer-every ", 0) == 0);
  const std::string row = Row(json, suggested);
  REQUIRE(!row.empty());
  CHECK(std::stod(JsonField(row, "of_compute")) >= 0.95);
  CHECK(JsonField(row, "fits") == "true");
  CHECK(JsonField(row, "learns_well") == "true");
  CHECK(Contains(r.out, "suggested: " + suggested));
  // The per-step codec that hides (top-k at 0.3%) is not printed as advice beside it.
  CHECK(!Contains(r.out, "suggested --compress"));
  CHECK(Contains(r.out, "per-step --compress auto would use topk:"));
  // Overlap's two more parameter copies do not fit a 32 GB peer at 1B: the suggested
  // row says to turn it off.
  CHECK_MESSAGE(Contains(suggested, "--outer-overlap off"), suggested);
}

TEST_CASE("plan: per-step against round sync -- per-step for a small model on a fast link") {
  TempDir tmp;
  const RunResult r = Plan(tmp, {"--layers=6", "--heads=6", "--dim=384", "--seq-len=256",
                                 "--batch=8", "--peers=4", "--gflops=100", "--link-mbps=10000"});
  INFO(r.out, r.err);
  REQUIRE(r.exit_code == 0);
  const std::string json = NonEmptyLines(r.out).back();
  CHECK(JsonField(json, "suggested_sync") == "--compress none");
  CHECK(Contains(json, "\"kind\":\"round\""));        // compared, not chosen
  CHECK(!Contains(json, "\"kind\":\"accumulate\""));  // nothing to hide

  // With --outer-every the plan is round sync's own; no comparison.
  const RunResult h =
      Plan(tmp, {"--layers=6", "--heads=6", "--dim=384", "--seq-len=256", "--batch=8", "--peers=4",
                 "--gflops=100", "--link-mbps=10000", "--outer-every=30"});
  REQUIRE(h.exit_code == 0);
  CHECK(!Contains(h.out, "per-step sync against round sync"));
  CHECK(!Contains(h.out, "suggested_sync"));
}

TEST_CASE("plan --train-tokens with --outer-every: the run at round sync's rate") {
  TempDir tmp;
  const RunResult r =
      Plan(tmp, {"--layers=20", "--heads=16", "--dim=2048", "--seq-len=1024", "--batch=1",
                 "--precision=bf16", "--recompute", "--peers=8", "--gflops=400", "--link-mbps=100",
                 "--outer-every=1000", "--outer-compress=none", "--outer-overlap=off",
                 "--train-tokens=2B"});
  INFO(r.out, r.err);
  REQUIRE(r.exit_code == 0);
  CHECK(Contains(r.out, "(the round sync rate above)"));
  const std::string json = NonEmptyLines(r.out).back();
  const size_t round_at = json.find("\"round\":{");
  REQUIRE(round_at != std::string::npos);
  const double round_rate = std::stod(JsonField(json.substr(round_at), "tokens_per_s"));
  const double step_rate = std::stod(JsonField(json, "balanced_tokens_per_s"));
  REQUIRE(round_rate > 0);
  CHECK(round_rate != doctest::Approx(step_rate).epsilon(0.01));
  // 2B tokens at the round's ~446 tokens/s: about 52 days.
  CHECK(std::stod(JsonField(json, "run_seconds")) ==
        doctest::Approx(2e9 / round_rate).epsilon(1e-3));
}
