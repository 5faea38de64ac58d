// Dense ring allreduce: exact sums for many (N, length), bit-identical results on
// random floats, token-weighted averaging, bf16 wire with error feedback, errors.
#include "collective/ring_allreduce.h"

#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <random>

#include "collective/ring_test_util.h"
#include "collective/small_collectives.h"

namespace rt::collective {
namespace {

using testing::RunOnRing;

// Integer-valued contributions: every partial sum is exact, so any order agrees.
float IntValue(int peer, size_t i) {
  return static_cast<float>(static_cast<int>((i * 7919 + peer * 104729) % 2001) - 1000);
}

void CheckAllOk(const std::vector<absl::Status>& status) {
  for (size_t p = 0; p < status.size(); ++p) {
    INFO("peer " << p << ": " << status[p].ToString());
    CHECK(status[p].ok());
  }
}

TEST_CASE("ring allreduce is exact for N = 1..5 and awkward lengths") {
#ifdef RINGTRAIN_SANITIZED
  const size_t big_prime = 10007;
#else
  const size_t big_prime = 1000003;
#endif
  for (int n = 1; n <= 5; ++n) {
    std::vector<size_t> lengths = {0, 1, 2, 3, size_t(n), size_t(n + 1), 97, 4099, big_prime};
    if (n > 1) lengths.push_back(n - 1);
    for (size_t len : lengths) {
      for (size_t chunk_bytes : {size_t{64}, size_t{1} << 20}) {
        // Zero-copy: the transport reads our buffer only when the successor takes
        // the message, so an early overwrite or a deadlocking wait would show.
        const bool zero_copy = chunk_bytes == 64;
        INFO("N=" << n << " length=" << len << " chunk_bytes=" << chunk_bytes);
        std::vector<std::vector<float>> data(n, std::vector<float>(len));
        for (int p = 0; p < n; ++p)
          for (size_t i = 0; i < len; ++i) data[p][i] = IntValue(p, i);
        AllreduceOptions options;
        options.chunk_bytes = chunk_bytes;
        options.timeout = absl::Seconds(20);
        CheckAllOk(RunOnRing(
            n,
            [&](net::RingTransport* t) {
              return AllreduceSum(t, absl::MakeSpan(data[t->rank()]), options);
            },
            zero_copy));
        bool all_exact = true;
        for (size_t i = 0; i < len; ++i) {
          float want = 0;
          for (int p = 0; p < n; ++p) want += IntValue(p, i);
          for (int p = 0; p < n; ++p) all_exact = all_exact && data[p][i] == want;
        }
        CHECK(all_exact);
      }
    }
  }
}

TEST_CASE("ring allreduce leaves bit-identical results on every peer for random floats") {
  for (int n : {2, 3, 5}) {
    const size_t len = 100003;
    std::vector<std::vector<float>> data(n, std::vector<float>(len));
    std::mt19937 rng(n);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    for (auto& d : data)
      for (float& x : d) x = normal(rng) * std::exp(normal(rng) * 3);
    AllreduceOptions options;
    options.chunk_bytes = 4096;
    CheckAllOk(RunOnRing(n, [&](net::RingTransport* t) {
      return AllreduceSum(t, absl::MakeSpan(data[t->rank()]), options);
    }));
    for (int p = 1; p < n; ++p) {
      CHECK(std::memcmp(data[p].data(), data[0].data(), len * sizeof(float)) == 0);
    }
  }
}

TEST_CASE("ring allreduce sums each segment in ring order from its owner") {
  // Values chosen so that float association matters: 1e8 + 1 + 1 + (-1e8) differs
  // by order. The result for segment s must equal ((x_s + x_{s+1}) + ...) in ring
  // order starting at peer s, with segments split as floor(L*s/N).
  const int n = 4;
  const size_t len = 8;
  const float vals[n] = {1e8f, 1.0f, 1.0f, -1e8f};
  std::vector<std::vector<float>> data(n, std::vector<float>(len));
  for (int p = 0; p < n; ++p)
    for (size_t i = 0; i < len; ++i) data[p][i] = vals[(p + i) % n];
  CheckAllOk(RunOnRing(
      n, [&](net::RingTransport* t) { return AllreduceSum(t, absl::MakeSpan(data[t->rank()])); }));
  for (size_t i = 0; i < len; ++i) {
    const int owner = static_cast<int>(i * n / len);
    float want = data.empty() ? 0 : vals[(owner + i) % n];
    for (int k = 1; k < n; ++k) want = want + vals[((owner + k) % n + i) % n];
    for (int p = 0; p < n; ++p) CHECK(data[p][i] == want);
  }
}

TEST_CASE("token-weighted average divides the sum by the total token count") {
  const int n = 3;
  const size_t len = 1001;
  const uint64_t tokens[n] = {100, 300, 0};
  std::vector<std::vector<float>> data(n, std::vector<float>(len));
  for (int p = 0; p < n; ++p)
    for (size_t i = 0; i < len; ++i) data[p][i] = IntValue(p, i);
  std::vector<uint64_t> totals(n);
  CheckAllOk(RunOnRing(n, [&](net::RingTransport* t) {
    return AllreduceTokenAverage(t, absl::MakeSpan(data[t->rank()]), tokens[t->rank()], {},
                                 &totals[t->rank()]);
  }));
  for (int p = 0; p < n; ++p) CHECK(totals[p] == 400);
  for (size_t i = 0; i < len; ++i) {
    const float sum = IntValue(0, i) + IntValue(1, i) + IntValue(2, i);
    CHECK(data[0][i] == sum * static_cast<float>(1.0 / 400));
    CHECK(data[1][i] == data[0][i]);
    CHECK(data[2][i] == data[0][i]);
  }
}

TEST_CASE("bf16 wire: identical results, bf16-exact values, conserved sum via residuals") {
  for (int n : {1, 2, 3, 5}) {
    const size_t len = 20011;
    std::vector<std::vector<float>> input(n, std::vector<float>(len));
    std::mt19937 rng(100 + n);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    for (auto& d : input)
      for (float& x : d) x = normal(rng);
    auto data = input;
    std::vector<std::vector<float>> residual(n, std::vector<float>(len, 123.0f));
    AllreduceOptions options;
    options.wire = WireFormat::kBf16;
    options.chunk_bytes = 1000;
    CheckAllOk(RunOnRing(
        n,
        [&](net::RingTransport* t) {
          RingAllreduce op(t, absl::MakeSpan(data[t->rank()]), options,
                           absl::MakeSpan(residual[t->rank()]));
          return op.run();
        },
        /*zero_copy=*/true));
    double worst = 0;
    for (size_t i = 0; i < len; ++i) {
      double in = 0, kept = 0;
      for (int p = 0; p < n; ++p) {
        in += input[p][i];
        kept += residual[p][i];
        CHECK(data[p][i] == data[0][i]);
      }
      if (n > 1) CHECK(Bf16ToFloat(FloatToBf16(data[0][i])) == data[0][i]);
      // result + residuals == inputs up to fp32 rounding of the (few) additions.
      worst = std::max(worst, std::fabs(data[0][i] + kept - in));
    }
    INFO("N=" << n);
    CHECK(worst < 1e-5);
  }
}

TEST_CASE("allreduce reports peers that disagree on the length, and timeouts") {
  std::vector<std::vector<float>> data = {std::vector<float>(100), std::vector<float>(101)};
  AllreduceOptions options;
  options.timeout = absl::Milliseconds(300);
  auto status = RunOnRing(2, [&](net::RingTransport* t) {
    return AllreduceSum(t, absl::MakeSpan(data[t->rank()]), options);
  });
  CHECK(!status[0].ok());
  CHECK(!status[1].ok());
  bool named = status[0].message().find("expected") != std::string::npos ||
               status[1].message().find("expected") != std::string::npos;
  CHECK(named);
  // A peer that never joins: the other times out instead of hanging.
  std::vector<float> lonely(10);
  auto ring = net::MakeInProcessRing(2);
  absl::Status s = AllreduceSum(ring[0].get(), absl::MakeSpan(lonely), options);
  CHECK(s.code() == absl::StatusCode::kDeadlineExceeded);
}

}  // namespace
}  // namespace rt::collective
