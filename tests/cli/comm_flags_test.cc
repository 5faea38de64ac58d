// The communication flags as train applies them (cli/common_flags.h ApplyCommFlags):
// --topk-warmup's default follows the run's length, explicit values are kept,
// and a value below -1 is refused by name.
#include <doctest/doctest.h>

#include <string>

#include "absl/flags/flag.h"
#include "cli/common_flags.h"

namespace rt::cli {
namespace {

struct Applied {
  absl::StatusOr<std::string> summary;
  train::RingReducerOptions options;
};

Applied Apply(const std::string& compress, int steps, int topk_warmup) {
  absl::SetFlag(&FLAGS_compress, compress);
  absl::SetFlag(&FLAGS_steps, steps);
  absl::SetFlag(&FLAGS_topk_warmup, topk_warmup);
  Applied a;
  a.summary = ApplyCommFlags(&a.options);
  return a;
}

TEST_CASE("--topk-warmup: by default a tenth of --steps, at least 75, explicit values kept") {
  const std::string compress = absl::GetFlag(FLAGS_compress);
  const int steps = absl::GetFlag(FLAGS_steps), warmup = absl::GetFlag(FLAGS_topk_warmup);
  CHECK(warmup == -1);  // the default
  for (const char* codec : {"topk:0.001", "auto"}) {
    CAPTURE(codec);
    Applied a = Apply(codec, 3000, -1);
    REQUIRE(a.summary.ok());
    CHECK(a.options.buckets.topk_warmup_steps == 300);
    CHECK(a.options.buckets.precondition_from == 300);
    CHECK(a.summary->find("topk_warmup=300 preconditioned") != std::string::npos);
    a = Apply(codec, 300, -1);  // short runs keep the 75 measured on them
    REQUIRE(a.summary.ok());
    CHECK(a.options.buckets.topk_warmup_steps == 75);
    a = Apply(codec, 3000, 40);
    REQUIRE(a.summary.ok());
    CHECK(a.options.buckets.topk_warmup_steps == 40);
    CHECK(a.options.buckets.precondition_from == 40);
    a = Apply(codec, 3000, 0);  // no warm-up, no preconditioning
    REQUIRE(a.summary.ok());
    CHECK(a.options.buckets.topk_warmup_steps == 0);
    CHECK(a.options.buckets.precondition_from < 0);
  }
  Applied bad = Apply("topk:0.01", 3000, -2);
  REQUIRE_FALSE(bad.summary.ok());
  CHECK(std::string(bad.summary.status().message()).find("--topk-warmup") != std::string::npos);
  absl::SetFlag(&FLAGS_compress, compress);
  absl::SetFlag(&FLAGS_steps, steps);
  absl::SetFlag(&FLAGS_topk_warmup, warmup);
}

TEST_CASE(
    "--topk-refresh: set for preconditioned top-k, refused where there is nothing to refresh") {
  const std::string compress = absl::GetFlag(FLAGS_compress);
  const int steps = absl::GetFlag(FLAGS_steps), warmup = absl::GetFlag(FLAGS_topk_warmup);
  CHECK(absl::GetFlag(FLAGS_topk_refresh) == 0);  // the default: v frozen after the warm-up
  absl::SetFlag(&FLAGS_topk_refresh, 20);
  Applied a = Apply("topk:0.01", 3000, -1);
  REQUIRE(a.summary.ok());
  CHECK(a.options.buckets.topk_refresh_every == 20);
  CHECK(a.summary->find("preconditioned topk_refresh=20") != std::string::npos);
  for (const char* codec : {"none", "bf16"}) {
    CAPTURE(codec);
    a = Apply(codec, 3000, -1);
    REQUIRE_FALSE(a.summary.ok());
    CHECK(std::string(a.summary.status().message()).find("--topk-refresh") != std::string::npos);
  }
  a = Apply("topk:0.01", 3000, 0);  // no warm-up: no frozen v to refresh
  REQUIRE_FALSE(a.summary.ok());
  absl::SetFlag(&FLAGS_topk_refresh, -1);
  a = Apply("topk:0.01", 3000, -1);
  REQUIRE_FALSE(a.summary.ok());
  CHECK(std::string(a.summary.status().message()).find("--topk-refresh must be >= 0") !=
        std::string::npos);
  absl::SetFlag(&FLAGS_topk_refresh, 0);
  absl::SetFlag(&FLAGS_compress, compress);
  absl::SetFlag(&FLAGS_steps, steps);
  absl::SetFlag(&FLAGS_topk_warmup, warmup);
}

}  // namespace
}  // namespace rt::cli
