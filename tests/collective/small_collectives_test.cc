// Allgather of byte strings and exact small sums.
#include "collective/small_collectives.h"

#include <doctest/doctest.h>

#include <string>
#include <thread>

#include "absl/time/clock.h"
#include "collective/ring_test_util.h"
#include "net/inproc_ring_transport.h"

namespace rt::collective {
namespace {

using testing::RunOnRing;

TEST_CASE("allgather of byte strings gives every peer every string by rank") {
  for (int n = 1; n <= 5; ++n) {
    std::vector<std::vector<std::vector<uint8_t>>> got(n);
    auto status = RunOnRing(n, [&](net::RingTransport* t) -> absl::Status {
      std::string mine = "hash-of-peer-" + std::string(t->rank(), 'x');
      auto all = AllgatherBytes(
          t, absl::MakeConstSpan(reinterpret_cast<const uint8_t*>(mine.data()), mine.size()));
      if (!all.ok()) return all.status();
      got[t->rank()] = *all;
      return absl::OkStatus();
    });
    for (int p = 0; p < n; ++p) {
      REQUIRE(status[p].ok());
      REQUIRE(got[p].size() == size_t(n));
      for (int q = 0; q < n; ++q) {
        std::string want = "hash-of-peer-" + std::string(q, 'x');
        CHECK(std::string(got[p][q].begin(), got[p][q].end()) == want);
      }
    }
  }
}

TEST_CASE("an allgather that fails on a receive keeps its strings until the successor has them") {
  // Zero-copy: the successor reads a message's bytes where the sender keeps them, when
  // it takes the message. Peer 0's predecessor is gone, so its first receive fails
  // while its own string is still queued for peer 1, which takes it late.
  net::InProcessRingOptions o;
  o.zero_copy = true;
  auto ring = net::MakeInProcessRing(3, o);
  ring[2].reset();
  std::vector<uint8_t> got;
  absl::Status received;
  std::thread successor([&] {
    absl::SleepFor(absl::Milliseconds(200));
    received = ring[1]->RecvFromPrev(&got, absl::Seconds(10));
  });
  const std::string mine(4096, 'a');
  auto all = AllgatherBytes(
      ring[0].get(),
      absl::MakeConstSpan(reinterpret_cast<const uint8_t*>(mine.data()), mine.size()),
      absl::Seconds(10));
  CHECK_FALSE(all.ok());
  // Freed strings would be reused here (and the successor would copy 'z's; under
  // ASan: a heap-use-after-free).
  std::vector<std::vector<uint8_t>> reuse(8, std::vector<uint8_t>(mine.size(), 'z'));
  successor.join();
  REQUIRE(received.ok());
  CHECK(std::string(got.begin(), got.end()) == mine);
}

TEST_CASE("small sums are exact for uint64 and identical (rank order) for doubles") {
  const int n = 4;
  std::vector<std::vector<uint64_t>> u(n);
  std::vector<std::vector<double>> d(n);
  const double dv[n] = {1e16, 1.0, -1e16, 1.0};
  auto status = RunOnRing(n, [&](net::RingTransport* t) -> absl::Status {
    const int r = t->rank();
    u[r] = {uint64_t(r) + 1, uint64_t{1} << 62};
    d[r] = {dv[r], 0.5 * r};
    absl::Status s = AllreduceSumU64(t, absl::MakeSpan(u[r]));
    if (!s.ok()) return s;
    return AllreduceSumF64(t, absl::MakeSpan(d[r]));
  });
  for (int p = 0; p < n; ++p) {
    REQUIRE(status[p].ok());
    CHECK(u[p][0] == 10);
    CHECK(u[p][1] == 0);                             // 4 * 2^62 wraps
    CHECK(d[p][0] == ((1e16 + 1.0) + -1e16) + 1.0);  // rank order, not the exact 2
    CHECK(d[p][1] == 3.0);
  }
}

TEST_CASE("small sums refuse peers with a different count of values") {
  auto status = RunOnRing(2, [&](net::RingTransport* t) -> absl::Status {
    std::vector<uint64_t> v(t->rank() + 1, 1);
    return AllreduceSumU64(t, absl::MakeSpan(v), absl::Seconds(5));
  });
  CHECK(!status[0].ok());
  CHECK(!status[1].ok());
  CHECK(status[0].message().find("peer 1 sent 16 bytes") != std::string::npos);
}

}  // namespace
}  // namespace rt::collective
