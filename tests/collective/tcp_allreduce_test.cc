// Dense ring allreduce over real TCP rings on loopback (peers in threads): exact sums
// and identical bytes for N = 2, 3 with many small chunks (allgather chunks read in
// place while reduce-scatter messages are still queued, queues pausing), fp32 and
// bf16 wires, and a peer that leaves mid-allreduce (an error naming a peer, no hang,
// and the buffers are no longer written once run() returned).
#include <doctest/doctest.h>

#include <algorithm>
#include <cstring>
#include <thread>

#include "../net/net_test_util.h"
#include "collective/ring_allreduce.h"
#include "core/clock.h"
#include "loopback_rings.h"

#if defined(__SANITIZE_THREAD__)
// The kernel reads a send buffer inside sendmsg; that the read is over before the
// peer's reply overwrites the buffer is proved by the reply itself, an order that
// travels through a socket ThreadSanitizer cannot see. So TSan does not count the
// kernel's read as an access of the sending thread; every access by our own threads
// stays checked (ring_allreduce.cc explains the allgather's in-place writes).
extern "C" const char* __tsan_default_options() { return "intercept_send=0"; }
#endif

namespace {

using namespace rt::collective;
using rt::net::TcpRing;
using rt::net::TcpRingOptions;
using namespace rt::net::testing;
using rt::collective::testing::MakeRings;

// Small integers: every partial sum is exact in fp32 and in bf16 (|sum| <= 120).
float IntValue(int peer, size_t i) {
  return static_cast<float>(static_cast<int>((i * 7919 + peer * 104729) % 81) - 40);
}

std::vector<absl::Status> RunAll(std::vector<std::unique_ptr<TcpRing>>& rings,
                                 std::vector<std::vector<float>>& data,
                                 const AllreduceOptions& options) {
  std::vector<absl::Status> status(rings.size());
  std::vector<std::thread> threads;
  for (size_t p = 0; p < rings.size(); ++p) {
    threads.emplace_back([&, p] {
      status[p] = RingAllreduce(rings[p].get(), absl::MakeSpan(data[p]), options).run();
    });
  }
  for (auto& t : threads) t.join();
  return status;
}

TEST_CASE("tcp allreduce: exact, identical bytes, allgather read in place, N = 2 and 3") {
#ifdef RINGTRAIN_SANITIZED
  const size_t big = 300007;
#else
  const size_t big = 3000017;
#endif
  for (int n : {2, 3}) {
    auto rings = MakeRings(n);
    for (size_t len : {size_t{0}, size_t{1}, size_t(n + 1), size_t{4099}, big}) {
      for (WireFormat wire : {WireFormat::kFp32, WireFormat::kBf16}) {
        INFO("N=" << n << " length=" << len << " bf16=" << (wire == WireFormat::kBf16));
        std::vector<std::vector<float>> data(n, std::vector<float>(len));
        for (int p = 0; p < n; ++p)
          for (size_t i = 0; i < len; ++i) data[p][i] = IntValue(p, i);
        AllreduceOptions options;
        options.chunk_bytes = 16 << 10;  // many chunks: queues fill and pause
        options.timeout = absl::Seconds(30);
        options.wire = wire;
        [[maybe_unused]] const uint64_t in_place_before =
            rings[0]->prev_link()->connection().messages_read_in_place();
        for (const absl::Status& st : RunAll(rings, data, options)) {
          INFO(st.ToString());
          REQUIRE(st.ok());
        }
        bool exact = true, identical = true;
        for (size_t i = 0; i < len; ++i) {
          float want = 0;
          for (int p = 0; p < n; ++p) want += IntValue(p, i);
          exact = exact && data[0][i] == want;
        }
        for (int p = 1; p < n; ++p) {
          identical = identical && (len == 0 || std::memcmp(data[p].data(), data[0].data(),
                                                            len * sizeof(float)) == 0);
        }
        CHECK(exact);
        CHECK(identical);
#if !defined(__SANITIZE_THREAD__)  // (under TSan only a waited-for chunk is read in place)
        if (len == big) {
          // The allgather destinations were posted up front: chunks go straight into place.
          CHECK(rings[0]->prev_link()->connection().messages_read_in_place() > in_place_before);
        }
#endif
      }
    }
  }
}

TEST_CASE("tcp allreduce: a peer leaving mid-way is an error naming a peer, not a hang") {
  auto rings = MakeRings(2);
#ifdef RINGTRAIN_SANITIZED
  const size_t len = 1 << 20;
#else
  const size_t len = 8 << 20;
#endif
  std::vector<float> mine(len, 1.0f);
  AllreduceOptions options;
  options.chunk_bytes = 64 << 10;
  options.timeout = absl::Seconds(20);
  rt::Stopwatch watch;
  // Peer 1 takes part in nothing and leaves: peer 0 has posted its allgather
  // destinations and sent its first chunks when the link breaks.
  std::thread leaver([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
    rings[1].reset();
  });
  absl::Status st = RingAllreduce(rings[0].get(), absl::MakeSpan(mine), options).run();
  leaver.join();
  INFO(st.ToString());
  CHECK(!st.ok());
  CHECK(StatusText(st).find("rank 1") != std::string::npos);
  CHECK(watch.ElapsedSeconds() < 15);
  // run() withdrew its destinations: the buffer may be reused or freed at once.
  std::fill(mine.begin(), mine.end(), 2.0f);
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  CHECK(std::all_of(mine.begin(), mine.end(), [](float x) { return x == 2.0f; }));
}

}  // namespace
