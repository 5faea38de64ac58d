// The allreduce's halves run alone (RingPhases, for optimizer sharding): after a
// reduce-scatter each peer's owned range holds the allreduce's bits (fp32 and bf16
// wire, residuals included); an allgather delivers every peer's owned range to all;
// reduce-scatter then allgather equals the allreduce bit for bit; the owned ranges
// tile the buffer.
#include <doctest/doctest.h>

#include <cstring>
#include <random>
#include <vector>

#include "collective/ring_allreduce.h"
#include "collective/ring_test_util.h"

namespace rt::collective {
namespace {

using testing::RunOnRing;

std::vector<std::vector<float>> RandomInputs(int n, size_t len, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<std::vector<float>> input(n, std::vector<float>(len));
  for (auto& d : input)
    for (float& x : d) x = normal(rng);
  return input;
}

bool SameBits(const float* a, const float* b, size_t n) {
  return n == 0 || std::memcmp(a, b, n * sizeof(float)) == 0;
}

void RunPhase(int n, std::vector<std::vector<float>>* data,
              std::vector<std::vector<float>>* residual, AllreduceOptions options) {
  const std::vector<absl::Status> status = RunOnRing(
      n,
      [&](net::RingTransport* t) {
        absl::Span<float> res;
        if (residual != nullptr) res = absl::MakeSpan((*residual)[t->rank()]);
        return RingAllreduce(t, absl::MakeSpan((*data)[t->rank()]), options, res).run();
      },
      /*zero_copy=*/true);
  for (int p = 0; p < n; ++p) {
    INFO("peer " << p << ": " << status[p].ToString());
    REQUIRE(status[p].ok());
  }
}

TEST_CASE("owned ranges tile the buffer, one per ring position") {
  for (int n = 1; n <= 7; ++n) {
    for (size_t len : {size_t{0}, size_t{1}, size_t{5}, size_t{1000}, size_t{1000003}}) {
      std::vector<int> owner(len < 2000 ? len : 0, -1);
      size_t total = 0, shortest = len, longest = 0;
      for (int r = 0; r < n; ++r) {
        const auto [b, e] = OwnedRange(len, n, r);
        REQUIRE(b <= e);
        REQUIRE(e <= len);
        total += e - b;
        shortest = std::min(shortest, e - b);
        longest = std::max(longest, e - b);
        for (size_t i = b; i < e && i < owner.size(); ++i) {
          CHECK(owner[i] == -1);
          owner[i] = r;
        }
      }
      INFO("N=" << n << " length=" << len);
      CHECK(total == len);
      CHECK(longest - shortest <= 1);
    }
  }
}

TEST_CASE("reduce-scatter leaves the allreduce's bits in each owned range") {
  for (WireFormat wire : {WireFormat::kFp32, WireFormat::kBf16}) {
    for (int n : {1, 2, 3, 4, 5}) {
      for (size_t len : {size_t{3}, size_t{4099}, size_t{20011}}) {
        INFO("wire " << (wire == WireFormat::kFp32 ? "fp32" : "bf16") << " N=" << n
                     << " length=" << len);
        const auto input = RandomInputs(n, len, 7 + n);
        AllreduceOptions options;
        options.wire = wire;
        options.chunk_bytes = 1000;
        auto full = input, scattered = input;
        std::vector<std::vector<float>> full_res(n, std::vector<float>(len, 9.0f));
        auto scattered_res = full_res;
        const bool bf16 = wire == WireFormat::kBf16;
        RunPhase(n, &full, bf16 ? &full_res : nullptr, options);
        options.phases = RingPhases::kReduceScatter;
        RunPhase(n, &scattered, bf16 ? &scattered_res : nullptr, options);
        for (int p = 0; p < n; ++p) {
          const auto [b, e] = OwnedRange(len, n, p);
          CHECK(SameBits(scattered[p].data() + b, full[p].data() + b, e - b));
          // The residuals come from the reduce-scatter alone: all of them agree.
          if (bf16) CHECK(SameBits(scattered_res[p].data(), full_res[p].data(), len));
        }
      }
    }
  }
}

TEST_CASE("allgather delivers each owned range, and scatter + gather equals the allreduce") {
#ifdef RINGTRAIN_SANITIZED
  const size_t big = 10007;  // 64-byte chunks: thousands of messages per peer
#else
  const size_t big = 100003;
#endif
  for (int n : {1, 2, 3, 4, 5}) {
    for (size_t len : {size_t{2}, size_t{4099}, big}) {
      for (size_t chunk_bytes : {size_t{64}, size_t{1} << 20}) {
        INFO("N=" << n << " length=" << len << " chunk_bytes=" << chunk_bytes);
        AllreduceOptions options;
        options.chunk_bytes = chunk_bytes;
        // Gather alone: peer p's range holds p + i/len, the rest garbage.
        std::vector<std::vector<float>> parts(n, std::vector<float>(len, -1.0f));
        for (int p = 0; p < n; ++p) {
          const auto [b, e] = OwnedRange(len, n, p);
          for (size_t i = b; i < e; ++i) parts[p][i] = p + static_cast<float>(i) / len;
        }
        options.phases = RingPhases::kAllgather;
        RunPhase(n, &parts, nullptr, options);
        bool delivered = true;
        for (int owner = 0; owner < n; ++owner) {
          const auto [b, e] = OwnedRange(len, n, owner);
          for (int p = 0; p < n; ++p)
            for (size_t i = b; i < e; ++i)
              delivered = delivered && parts[p][i] == owner + static_cast<float>(i) / len;
        }
        CHECK(delivered);
        // Both halves on one buffer: the allreduce, bit for bit.
        const auto input = RandomInputs(n, len, 99 + n);
        auto full = input, halves = input;
        options.phases = RingPhases::kAllreduce;
        RunPhase(n, &full, nullptr, options);
        options.phases = RingPhases::kReduceScatter;
        RunPhase(n, &halves, nullptr, options);
        options.phases = RingPhases::kAllgather;
        RunPhase(n, &halves, nullptr, options);
        for (int p = 0; p < n; ++p) CHECK(SameBits(halves[p].data(), full[p].data(), len));
      }
    }
  }
}

TEST_CASE("allgather refuses the bf16 wire") {
  std::vector<std::vector<float>> data(2, std::vector<float>(10));
  AllreduceOptions options;
  options.wire = WireFormat::kBf16;
  options.phases = RingPhases::kAllgather;
  const auto status = RunOnRing(2, [&](net::RingTransport* t) {
    return RingAllreduce(t, absl::MakeSpan(data[t->rank()]), options).run();
  });
  for (const absl::Status& s : status) CHECK(absl::IsInvalidArgument(s));
}

}  // namespace
}  // namespace rt::collective
