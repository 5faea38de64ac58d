// Metrics JSON lines, the parameter hash, and contiguous evaluation windows.
#include <doctest/doctest.h>
#include <omp.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "train/evaluator.h"
#include "train/metrics_writer.h"
#include "train/param_hash.h"

TEST_CASE("StepMetricsJson writes every field, null for non-finite numbers") {
  rt::train::StepMetrics m;
  m.step = 3;
  m.loss = 2.5;
  m.lr = 1e-4;
  m.tokens = 1024;
  m.tokens_per_s = std::numeric_limits<double>::infinity();
  m.param_hash = "00ff";
  std::string s = rt::train::StepMetricsJson(m);
  CHECK(s.find("\"step\":3,") != std::string::npos);
  CHECK(s.find("\"loss\":2.5,") != std::string::npos);
  CHECK(s.find("\"lr\":0.0001,") != std::string::npos);
  CHECK(s.find("\"tokens_per_s\":null,") != std::string::npos);
  CHECK(s.find("\"param_hash\":\"00ff\"") != std::string::npos);
  CHECK(s.find("\"slots\":0,\"wait_ms\":0") != std::string::npos);
  CHECK(s.back() == '}');
  CHECK(s.find("val_loss") == std::string::npos);
  CHECK(s.find("\"time\"") == std::string::npos);
  m.time_s = 1767225600.25;
  CHECK(rt::train::StepMetricsJson(m).find(",\"time\":1767225600.250,") != std::string::npos);
  m.val_loss = 3.0;
  m.val_bpb = 1.25;
  s = rt::train::StepMetricsJson(m);
  CHECK(s.find(",\"val_loss\":3,\"val_bpb\":1.25}") != std::string::npos);
}

TEST_CASE("ParamHash sees every bit and is independent of the thread count") {
  std::vector<float> x(200003);
  for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(static_cast<float>(i));
  omp_set_num_threads(1);
  const uint64_t h = rt::train::ParamHash(x);
  omp_set_num_threads(2);
  CHECK(rt::train::ParamHash(x) == h);
  omp_set_num_threads(1);
  for (size_t i : {size_t{0}, size_t{65535}, size_t{65536}, x.size() - 1}) {
    std::vector<float> y = x;
    uint32_t bits;
    std::memcpy(&bits, &y[i], 4);
    bits ^= 1u;  // lowest mantissa bit
    std::memcpy(&y[i], &bits, 4);
    CHECK(rt::train::ParamHash(y) != h);
  }
  CHECK(rt::train::ParamHash(absl::MakeConstSpan(x).subspan(0, x.size() - 1)) != h);
  CHECK(rt::train::ParamHashHex(0xabcull) == "0000000000000abc");
}

TEST_CASE("ContiguousWindows covers the split with non-overlapping windows") {
  auto w = rt::train::ContiguousWindows(100, 16, 0);
  CHECK(w == std::vector<uint64_t>{0, 16, 32, 48, 64, 80});      // 80 + 17 <= 100
  CHECK(rt::train::ContiguousWindows(100, 16, 20).size() == 2);  // ceil(20 / 16)
  CHECK(rt::train::ContiguousWindows(16, 16, 0).empty());
}
