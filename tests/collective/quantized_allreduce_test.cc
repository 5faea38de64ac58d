// Block-scaled int8/int4 messages (block_quant.h) and the quantised ring allreduce
// (quantized_allreduce.h): round trips within half a quantisation step, the residual as
// the exact-in-fp32 difference, decoding refuses damaged messages, replicas identical
// for N = 2..5 and awkward lengths, the sum within the expected error, error feedback
// that makes the time-average of many exchanges converge to the exact sum, and the
// wire bytes (a quarter / an eighth of fp32's).
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "collective/block_quant.h"
#include "collective/quantized_allreduce.h"
#include "collective/ring_test_util.h"

namespace rt::collective {
namespace {

using testing::RunOnRing;

std::vector<float> Gaussian(size_t n, uint32_t seed, float sigma = 1.0f) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> d(0.0f, sigma);
  std::vector<float> v(n);
  for (float& x : v) x = d(gen);
  return v;
}

TEST_CASE("int8 and int4 blocks round-trip within half a step, the residual is the rest") {
  for (int bits : {8, 4}) {
    for (size_t n : {size_t{0}, size_t{1}, size_t{63}, size_t{64}, size_t{65}, size_t{1001}}) {
      INFO(bits, " bits, ", n, " values");
      std::vector<float> v = Gaussian(n, 11);
      if (n > 3) v[3] = 0.0f;  // zeros stay zeros
      std::vector<float> residual(n), back(n);
      std::vector<uint8_t> wire;
      EncodeQuantized(v, bits, absl::MakeSpan(residual), &wire);
      CHECK(wire.size() == QuantizedBytes(n, bits));
      REQUIRE(DecodeQuantized(wire, bits, n, absl::MakeSpan(back)).ok());
      const float levels = bits == 8 ? 127.0f : 7.0f;
      for (size_t b = 0; b < n; b += kQuantBlock) {
        float absmax = 0;
        for (size_t i = b; i < std::min(n, b + kQuantBlock); ++i)
          absmax = std::max(absmax, std::fabs(v[i]));
        for (size_t i = b; i < std::min(n, b + kQuantBlock); ++i) {
          CHECK(std::fabs(back[i] - v[i]) <= 0.5f * absmax / levels * 1.0001f);
          CHECK(residual[i] == v[i] - back[i]);
        }
      }
      if (n > 3) CHECK(back[3] == 0.0f);
    }
  }
  CHECK(QuantizedBytes(6400, 8) == 12 + 100 * 68);
  CHECK(QuantizedBytes(6400, 4) == 12 + 100 * 36);
}

TEST_CASE("decoding refuses damaged or unexpected messages with a reason") {
  std::vector<float> v = Gaussian(130, 5), out(130);
  std::vector<uint8_t> wire;
  EncodeQuantized(v, 4, {}, &wire);
  REQUIRE(DecodeQuantized(wire, 4, 130, absl::MakeSpan(out)).ok());
  CHECK(DecodeQuantized(wire, 8, 130, absl::MakeSpan(out)).code() == absl::StatusCode::kDataLoss);
  std::vector<float> shorter(129);
  CHECK(!DecodeQuantized(wire, 4, 129, absl::MakeSpan(shorter)).ok());
  std::vector<uint8_t> cut(wire.begin(), wire.end() - 1);
  CHECK(!DecodeQuantized(cut, 4, 130, absl::MakeSpan(out)).ok());
  std::vector<uint8_t> bad = wire;
  const float nan = std::nanf("");
  std::memcpy(bad.data() + kQuantHeaderBytes, &nan, 4);
  CHECK(std::string(DecodeQuantized(bad, 4, 130, absl::MakeSpan(out)).message()).find("scale") !=
        std::string::npos);
  bad = wire;
  bad[kQuantHeaderBytes + 4] = 0x88;  // -8 in both nibbles: outside [-7, 7]
  CHECK(!DecodeQuantized(bad, 4, 130, absl::MakeSpan(out)).ok());
  bad = wire;
  bad[0] = 'X';
  CHECK(!DecodeQuantized(bad, 4, 130, absl::MakeSpan(out)).ok());
  bad = wire;
  bad.back() |= 0xf0;  // 130 = 2 x 64 + 2: the last block is even, so no padding...
  // ...but a 3-value block has one: its high nibble must be zero.
  std::vector<float> three = {1.0f, -1.0f, 0.5f}, out3(3);
  EncodeQuantized(three, 4, {}, &wire);
  wire.back() |= 0x10;
  CHECK(!DecodeQuantized(wire, 4, 3, absl::MakeSpan(out3)).ok());
}

TEST_CASE(
    "quantised ring allreduce: identical on every peer, near the exact sum, 1/4 or 1/8 of fp32's "
    "bytes") {
  for (int bits : {8, 4}) {
    for (int n = 2; n <= 5; ++n) {
      for (size_t len : {size_t{1}, static_cast<size_t>(n - 1), size_t{97}, size_t{10007}}) {
        for (size_t chunk : {size_t{64}, size_t{1} << 20}) {
          INFO(bits, " bits, N=", n, " length ", len, " chunk ", chunk);
          std::vector<std::vector<float>> data(n), residual(n, std::vector<float>(len));
          std::vector<double> exact(len, 0.0);
          for (int p = 0; p < n; ++p) {
            data[p] = Gaussian(len, 100 + p, 0.01f);
            for (size_t i = 0; i < len; ++i) exact[i] += data[p][i];
          }
          std::vector<std::vector<float>> input = data;
          std::vector<uint64_t> sent(n, 0);
          QuantizedAllreduceOptions o;
          o.bits = bits;
          o.chunk_values = chunk;
          o.timeout = absl::Seconds(20);
          const std::vector<absl::Status> st = RunOnRing(
              n,
              [&](net::RingTransport* t) {
                const int r = t->rank();
                return QuantizedRingAllreduce(t, absl::MakeSpan(data[r]),
                                              absl::MakeSpan(residual[r]), o, &sent[r]);
              },
              /*zero_copy=*/true);
          for (const absl::Status& s : st) REQUIRE_MESSAGE(s.ok(), s.message());
          for (int p = 1; p < n; ++p) CHECK(data[p] == data[0]);
          // Sum of residuals + result == sum of inputs (up to fp32 rounding).
          double worst = 0, scale = 0;
          for (size_t i = 0; i < len; ++i) {
            double r = data[0][i];
            for (int p = 0; p < n; ++p) r += residual[p][i];
            worst = std::max(worst, std::fabs(r - exact[i]));
            scale = std::max(scale, std::fabs(exact[i]));
          }
          CHECK(worst <= 1e-5 * std::max(1.0, scale * n));
          if (len >= 10007 && chunk > len) {
            const double fp32 = 2.0 * (n - 1) / n * len * 4;
            const double per = bits == 8 ? 1.0625 : 0.5625;
            CHECK(sent[0] == doctest::Approx(fp32 * per / 4).epsilon(0.02));
          }
        }
      }
    }
  }
}

TEST_CASE("error feedback: the mean of repeated quantised exchanges converges to the exact sum") {
  const int n = 3;
  const size_t len = 640;
  std::vector<std::vector<float>> x(n), residual(n, std::vector<float>(len, 0.0f));
  std::vector<double> exact(len, 0.0);
  for (int p = 0; p < n; ++p) {
    x[p] = Gaussian(len, 7 + p);
    for (size_t i = 0; i < len; ++i) exact[i] += x[p][i];
  }
  const int rounds = 50;
  std::vector<double> mean(len, 0.0);
  double first_error = 0;
  for (int k = 0; k < rounds; ++k) {
    std::vector<std::vector<float>> data(n, std::vector<float>(len));
    for (int p = 0; p < n; ++p)
      for (size_t i = 0; i < len; ++i) data[p][i] = x[p][i] + residual[p][i];
    QuantizedAllreduceOptions o;
    o.bits = 4;
    const auto st = RunOnRing(n, [&](net::RingTransport* t) {
      return QuantizedRingAllreduce(t, absl::MakeSpan(data[t->rank()]),
                                    absl::MakeSpan(residual[t->rank()]), o);
    });
    for (const absl::Status& s : st) REQUIRE(s.ok());
    for (size_t i = 0; i < len; ++i) mean[i] += data[0][i];
    if (k == 0) {
      for (size_t i = 0; i < len; ++i)
        first_error = std::max(first_error, std::fabs(data[0][i] - exact[i]));
    }
  }
  double error = 0;
  for (size_t i = 0; i < len; ++i) error = std::max(error, std::fabs(mean[i] / rounds - exact[i]));
  MESSAGE("int4, one exchange: max error ", first_error, "; mean of ", rounds, ": ", error);
  CHECK(first_error > 0.05);        // one int4 exchange is coarse...
  CHECK(error < first_error / 10);  // ...error feedback carries the rest into later ones
}

}  // namespace
}  // namespace rt::collective
