// The run's price and the GPU offer file of `ringtrain plan` (train/run_cost.h): the
// shipped example parses, every malformed line is refused naming FILE:LINE, and the
// arithmetic of time, tokens per day and cost.
#include "train/run_cost.h"

#include <doctest/doctest.h>

#include <fstream>
#include <sstream>
#include <string>

namespace rt::train {
namespace {

TEST_CASE("the shipped tools/gpu-prices.txt parses, with a source on every offer") {
  std::ifstream f(RINGTRAIN_SOURCE_DIR "/tools/gpu-prices.txt");
  REQUIRE(f.good());
  std::ostringstream text;
  text << f.rdbuf();
  absl::StatusOr<std::vector<GpuOffer>> offers = ParseGpuPrices(text.str(), "gpu-prices.txt");
  REQUIRE_MESSAGE(offers.ok(), offers.status().message());
  REQUIRE(offers->size() >= 2);
  for (const GpuOffer& o : *offers) {
    CAPTURE(o.name);
    CHECK(o.price_per_hour > 0);
    CHECK(o.tflops > 0);
    CHECK(o.note.find("20") != std::string::npos);  // a date
  }
}

TEST_CASE("gpu offers: both throughput forms, comments, and errors naming FILE:LINE") {
  absl::StatusOr<std::vector<GpuOffer>> ok = ParseGpuPrices(
      "# comment\n\nA 1.5 tflops=100  # src, 2026\n\tB\t0.5\ttokens_per_s=2000\n", "f.txt");
  REQUIRE(ok.ok());
  REQUIRE(ok->size() == 2);
  CHECK((*ok)[0].name == "A");
  CHECK((*ok)[0].tflops == 100);
  CHECK((*ok)[0].note == "src, 2026");
  CHECK((*ok)[1].tokens_per_s == 2000);
  CHECK(GpuTokensPerSecond((*ok)[0], 1e9) == doctest::Approx(1e5));  // 100e12 / 1e9
  CHECK(GpuTokensPerSecond((*ok)[1], 1e9) == 2000);

  for (auto [text, want] : {std::pair{"A 1.5\n", "f.txt:1: expected NAME"},
                            std::pair{"# x\nA -1 tflops=3\n", "f.txt:2: price per hour '-1'"},
                            std::pair{"A 1 tflops=0\n", "f.txt:1: tflops '0'"},
                            std::pair{"A 1 tflops=nan\n", "f.txt:1: tflops 'nan'"},
                            std::pair{"A 1 gflops=3\n", "f.txt:1: 'gflops=3'"},
                            std::pair{"A 1 tokens_per_s=x y\n", "f.txt:1: expected NAME"},
                            std::pair{"# only comments\n", "f.txt: no offers"}}) {
    CAPTURE(text);
    absl::StatusOr<std::vector<GpuOffer>> bad = ParseGpuPrices(text, "f.txt");
    REQUIRE_FALSE(bad.ok());
    CHECK_MESSAGE(std::string(bad.status().message()).find(want) == 0, bad.status().message());
  }
}

TEST_CASE("token counts take plain numbers, exponents and suffixes, and refuse the rest") {
  CHECK(*ParseTokenCount("2000000000") == 2e9);
  CHECK(*ParseTokenCount("2e9") == 2e9);
  CHECK(*ParseTokenCount("2B") == 2e9);
  CHECK(*ParseTokenCount("2G") == 2e9);
  CHECK(*ParseTokenCount("500M") == 5e8);
  CHECK(*ParseTokenCount(" 1.5k ") == 1500);
  for (const char* bad : {"", "0", "-5", "x", "2X", "1e20", "inf"}) {
    CAPTURE(bad);
    absl::StatusOr<double> r = ParseTokenCount(bad);
    REQUIRE_FALSE(r.ok());
    CHECK(std::string(r.status().message()).find("--train-tokens") != std::string::npos);
  }
}

TEST_CASE("a run's time, tokens per day and cost") {
  const RunCost c = PriceRun(/*tokens=*/8.64e6, /*tokens_per_s=*/100, /*units=*/8, 0.5);
  CHECK(c.seconds == doctest::Approx(86400));
  CHECK(c.tokens_per_day == doctest::Approx(8.64e6));
  CHECK(c.cost == doctest::Approx(8 * 0.5 * 24));
  CHECK(PriceRun(1e6, 0, 8, 0.5).cost == 0);  // no speed: no estimate
}

}  // namespace
}  // namespace rt::train
