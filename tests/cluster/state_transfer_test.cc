// State transfer over loopback links: a few MB arrive bit-exact; hundreds of small
// chunks streamed through a window of a few (plain and sealed links) arrive bit-exact
// and the source never queues more than its window; a refused version, a corrupt
// chunk, a chunk left out, a silent source and a source that dies mid-transfer give
// clear errors within their bounds; a stop request ends either side at once.
#include "cluster/state_transfer.h"

#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <random>
#include <thread>

#include "cluster/service_test_util.h"
#include "core/clock.h"

namespace rt::cluster {
namespace {

struct Pair {
  explicit Pair(bool sealed = false) : encrypt(sealed) {}
  bool encrypt;
  std::vector<net::HostEntry> hosts = net::testing::LoopbackHosts(2);
  std::shared_ptr<net::TcpNode> a = Start(0), b = Start(1);
  std::shared_ptr<net::TcpNode> Start(int rank) {
    net::TcpNodeOptions o = testing::LoopbackNodeOptions(hosts, rank);
    o.encrypt = encrypt;
    auto n = net::TcpNode::Start(o);
    REQUIRE_MESSAGE(n.ok(), n.status().ToString());
    return *n;
  }
};

std::vector<uint8_t> RandomBytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> v(n);
  for (auto& x : v) x = static_cast<uint8_t>(rng());
  return v;
}

TransferOptions Quick() {
  TransferOptions o;
  o.connect_timeout = absl::Seconds(3);
  o.idle_timeout = absl::Milliseconds(500);
  o.total_timeout = absl::Seconds(10);
  o.chunk_bytes = 256 << 10;
  return o;
}

struct Served {
  std::thread thread;
  absl::Status status;
};

TEST_CASE("a few MB of state arrive bit-exact, section by section") {
  Pair p;
#ifdef RINGTRAIN_SANITIZED
  const size_t big = 1 << 20;
#else
  const size_t big = 6 << 20;
#endif
  const auto params = RandomBytes(big, 1), moments = RandomBytes(big / 3 + 7, 2),
             rng = RandomBytes(40, 3);
  StateSource src{{4, 120},
                  {{"params", params}, {"moments", moments}, {"empty", {}}, {"rng", rng}}};
  const uint64_t ch = StateChannel(5);
  absl::Status served;
  std::thread t([&] { served = ServeState(p.a, 1, ch, src, Quick()); });
  Stopwatch w;
  auto got = FetchState(p.b, 0, ch, {4, 120}, Quick());
  const double s = w.ElapsedSeconds();
  t.join();
  REQUIRE_MESSAGE(got.ok(), got.status().ToString());
  CHECK_MESSAGE(served.ok(), served.ToString());
  CHECK(got->version == StateVersion{4, 120});
  REQUIRE(got->sections.size() == 4);
  CHECK(got->Find("params")->bytes == params);
  CHECK(got->Find("moments")->bytes == moments);
  CHECK(got->Find("empty")->bytes.empty());
  CHECK(got->Find("rng")->bytes == rng);
  MESSAGE("state transfer of " << (params.size() + moments.size()) / 1e6 << " MB in " << s * 1e3
                               << " ms");
  // The received snapshot can be served on (a member that fetched serves the next).
  StateSource again = got->AsSource();
  CHECK(again.sections[0].bytes.data() == got->sections[0].bytes.data());
}

TEST_CASE("hundreds of chunks stream through a window of four and arrive bit-exact") {
  // 4 KB chunks and a 16 KB window: the source queues a chunk only once the kernel took
  // all but three, so at most four wait on the link at any time; the fetcher reads each
  // straight into its place. Section sizes that are not multiples of the chunk size
  // (and an empty one) check the offsets at every boundary.
  for (const bool sealed : {false, true}) {
    CAPTURE(sealed);
    Pair p(sealed);
    const auto params = RandomBytes((1 << 20) + 123, 11), moments = RandomBytes(300000, 12),
               tail = RandomBytes(4095, 13);
    StateSource src{{6, 50},
                    {{"params", params}, {"empty", {}}, {"moments", moments}, {"tail", tail}}};
    TransferOptions o = Quick();
    o.chunk_bytes = 4096;
    o.window_bytes = 4 * 4096;
    TransferStats served_stats, fetched_stats;
    TransferOptions serve_o = o, fetch_o = o;
    serve_o.stats = &served_stats;
    fetch_o.stats = &fetched_stats;
    absl::Status served;
    std::thread t([&] { served = ServeState(p.a, 1, StateChannel(6), src, serve_o); });
    auto got = FetchState(p.b, 0, StateChannel(6), {6, 50}, fetch_o);
    t.join();
    REQUIRE_MESSAGE(got.ok(), got.status().ToString());
    CHECK_MESSAGE(served.ok(), served.ToString());
    CHECK(got->Find("params")->bytes == params);
    CHECK(got->Find("empty")->bytes.empty());
    CHECK(got->Find("moments")->bytes == moments);
    CHECK(got->Find("tail")->bytes == tail);
    const uint64_t total = params.size() + moments.size() + tail.size();
    CHECK(served_stats.bytes == total);
    CHECK(fetched_stats.bytes == total);
    CHECK(fetched_stats.first_chunk_s >= 0);
    CHECK(fetched_stats.first_chunk_s <= fetched_stats.seconds);
    // Sealed: each queued chunk is a sealed copy, so the window bounds that memory.
    CHECK(served_stats.peak_queued_chunks >= 1);
    CHECK(served_stats.peak_queued_chunks <= 4);
  }
}

TEST_CASE("a chunk left out is refused as out of order, on both sides") {
  Pair p;
  const auto bytes = RandomBytes(64 << 10, 14);
  StateSource src{{1, 8}, {{"params", bytes}}};
  TransferOptions o = Quick();
  o.chunk_bytes = 4096;
  o.test_skip_chunk = 3;
  absl::Status served;
  std::thread t([&] { served = ServeState(p.a, 1, StateChannel(1), src, o); });
  auto got = FetchState(p.b, 0, StateChannel(1), {1, 8}, o);
  t.join();
  REQUIRE_FALSE(got.ok());
  CHECK(absl::IsDataLoss(got.status()));
  CHECK_MESSAGE(got.status().message().find("chunk out of order: got section 0 offset 16384") !=
                    std::string::npos,
                got.status().ToString());
  CHECK(absl::IsDataLoss(served));
  CHECK(served.message().find("refused the copy") != std::string::npos);
}

TEST_CASE("a stop request ends a transfer at once, whatever it waits for") {
  // SIGTERM reaches a fetcher in the middle of a long transfer (here: a source that
  // stalls after two chunks, or never answers) or a source waiting for its fetcher:
  // both end within a poll with Cancelled, not after their 10 s timeouts.
  Pair p;
  const auto bytes = RandomBytes(1 << 20, 15);
  StateSource src{{3, 9}, {{"params", bytes}}};
  TransferOptions o = Quick();
  o.chunk_bytes = 4096;
  o.connect_timeout = absl::Seconds(10);
  o.idle_timeout = absl::Seconds(10);
  std::atomic<bool> stop{false};
  std::thread flip([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    stop = true;
  });
  SUBCASE("fetcher: the source stalls mid-transfer") {
    TransferOptions serve_o = o;
    serve_o.test_stall_after_chunks = 2;
    absl::Status served;
    std::thread t([&] { served = ServeState(p.a, 1, StateChannel(3), src, serve_o); });
    TransferOptions fetch_o = o;
    fetch_o.stop = [&] { return stop.load(); };
    Stopwatch w;
    auto got = FetchState(p.b, 0, StateChannel(3), {3, 9}, fetch_o);
    const double s = w.ElapsedSeconds();
    t.join();
    REQUIRE_FALSE(got.ok());
    CHECK_MESSAGE(absl::IsCancelled(got.status()), got.status().ToString());
    CHECK(got.status().message().find("stop requested") != std::string::npos);
    CHECK(s < 2);
    CHECK_FALSE(served.ok());  // the stalled source saw the fetcher close
  }
  SUBCASE("fetcher: the source accepted the link and never answers") {
    std::unique_ptr<net::Link> held;
    std::thread t([&] {
      auto pending = p.a->AcceptFrom(1, StateChannel(3), absl::Now() + absl::Seconds(3));
      if (pending->Wait(absl::Seconds(3))) {
        auto l = pending->Take();
        if (l.ok()) held = *std::move(l);
      }
    });
    TransferOptions fetch_o = o;
    fetch_o.stop = [&] { return stop.load(); };
    Stopwatch w;
    auto got = FetchState(p.b, 0, StateChannel(3), {3, 9}, fetch_o);
    t.join();
    REQUIRE_FALSE(got.ok());
    CHECK_MESSAGE(absl::IsCancelled(got.status()), got.status().ToString());
    CHECK(w.ElapsedSeconds() < 2);
  }
  SUBCASE("source: the fetcher never comes") {
    TransferOptions serve_o = o;
    serve_o.stop = [&] { return stop.load(); };
    Stopwatch w;
    absl::Status served = ServeState(p.a, 1, StateChannel(3), src, serve_o);
    CHECK_MESSAGE(absl::IsCancelled(served), served.ToString());
    CHECK(served.message().find("stop requested") != std::string::npos);
    CHECK(w.ElapsedSeconds() < 2);
  }
  flip.join();
}

TEST_CASE("a source that no longer holds the version refuses, and the fetcher says why") {
  Pair p;
  const auto bytes = RandomBytes(1000, 4);
  StateSource src{{4, 121}, {{"params", bytes}}};
  absl::Status served;
  std::thread t([&] { served = ServeState(p.a, 1, StateChannel(5), src, Quick()); });
  auto got = FetchState(p.b, 0, StateChannel(5), {4, 120}, Quick());
  t.join();
  REQUIRE_FALSE(got.ok());
  CHECK(absl::IsFailedPrecondition(got.status()));
  CHECK(got.status().message().find("holds step 121 (epoch 4)") != std::string::npos);
  CHECK(absl::IsFailedPrecondition(served));
}

TEST_CASE("a corrupt chunk is detected by its checksum and reported to both sides") {
  Pair p;
  const auto bytes = RandomBytes(1 << 20, 5);
  StateSource src{{1, 7}, {{"params", bytes}}};
  TransferOptions o = Quick();
  o.test_flip_byte_at = 700000;
  absl::Status served;
  std::thread t([&] { served = ServeState(p.a, 1, StateChannel(1), src, o); });
  auto got = FetchState(p.b, 0, StateChannel(1), {1, 7}, o);
  t.join();
  REQUIRE_FALSE(got.ok());
  CHECK(absl::IsDataLoss(got.status()));
  CHECK(got.status().message().find("corrupt chunk of section 'params'") != std::string::npos);
  CHECK(absl::IsDataLoss(served));
  CHECK(served.message().find("refused the copy") != std::string::npos);
}

TEST_CASE("a source that dies mid-transfer or goes silent does not hang the fetcher") {
  Pair p;
  const auto bytes = RandomBytes(2 << 20, 6);
  StateSource src{{2, 9}, {{"params", bytes}}};
  SUBCASE("closed after two chunks") {
    TransferOptions o = Quick();
    o.test_close_after_chunks = 2;
    o.idle_timeout = absl::Seconds(5);  // the close, not the timeout, must end it
    absl::Status served;
    std::thread t([&] { served = ServeState(p.a, 1, StateChannel(2), src, o); });
    Stopwatch w;
    auto got = FetchState(p.b, 0, StateChannel(2), {2, 9}, o);
    t.join();
    REQUIRE_FALSE(got.ok());
    CHECK(w.ElapsedSeconds() < 3);
    CHECK(got.status().message().find("fetching step 9 (epoch 2)") != std::string::npos);
  }
  SUBCASE("silent: accepts the link and never answers") {
    std::unique_ptr<net::Link> held;
    std::thread t([&] {
      auto pending = p.a->AcceptFrom(1, StateChannel(2), absl::Now() + absl::Seconds(3));
      if (pending->Wait(absl::Seconds(3))) {
        auto l = pending->Take();
        if (l.ok()) held = *std::move(l);
      }
    });
    Stopwatch w;
    auto got = FetchState(p.b, 0, StateChannel(2), {2, 9}, Quick());
    t.join();
    REQUIRE_FALSE(got.ok());
    CHECK(absl::IsDeadlineExceeded(got.status()));
    CHECK(got.status().message().find("went silent") != std::string::npos);
    CHECK(w.ElapsedSeconds() < 2);
  }
  SUBCASE("dead: nobody listens") {
    p.a.reset();
    TransferOptions o = Quick();
    o.connect_timeout = absl::Milliseconds(400);
    Stopwatch w;
    auto got = FetchState(p.b, 0, StateChannel(2), {2, 9}, o);
    REQUIRE_FALSE(got.ok());
    CHECK(absl::IsDeadlineExceeded(got.status()));
    CHECK(w.ElapsedSeconds() < 2);
  }
}

TEST_CASE("a newer view ends the waits of both sides at once, not after their timeouts") {
  // A fetcher handling an older view (its decisions come in order) asks a source that
  // has moved on to a newer view and will never answer on that view's channel; and a
  // source waits for a fetcher that has moved on. `superseded` turns true a moment
  // later, as a queued newer decision would: both give up within a poll, with
  // Cancelled, instead of the 10 s timeouts.
  Pair p;
  const auto bytes = RandomBytes(1 << 16, 7);
  TransferOptions o = Quick();
  o.connect_timeout = absl::Seconds(10);
  o.idle_timeout = absl::Seconds(10);
  std::atomic<bool> newer{false};
  o.superseded = [&] { return newer.load(); };
  std::thread flip([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    newer = true;
  });
  SUBCASE("fetcher: the source accepted the link and never answers") {
    std::unique_ptr<net::Link> held;
    std::thread t([&] {
      auto pending = p.a->AcceptFrom(1, StateChannel(3), absl::Now() + absl::Seconds(3));
      if (pending->Wait(absl::Seconds(3))) {
        auto l = pending->Take();
        if (l.ok()) held = *std::move(l);
      }
    });
    Stopwatch w;
    auto got = FetchState(p.b, 0, StateChannel(3), {3, 9}, o);
    t.join();
    REQUIRE_FALSE(got.ok());
    CHECK_MESSAGE(absl::IsCancelled(got.status()), got.status().ToString());
    CHECK(got.status().message().find("superseded") != std::string::npos);
    CHECK(w.ElapsedSeconds() < 2);
  }
  SUBCASE("source: the fetcher never comes") {
    StateSource src{{3, 9}, {{"params", bytes}}};
    Stopwatch w;
    absl::Status served = ServeState(p.a, 1, StateChannel(3), src, o);
    CHECK_MESSAGE(absl::IsCancelled(served), served.ToString());
    CHECK(w.ElapsedSeconds() < 2);
  }
  SUBCASE("while nothing is newer, the transfer runs as before") {
    TransferOptions quiet = Quick();
    quiet.superseded = [] { return false; };  // polled, never true
    StateSource src{{3, 9}, {{"params", bytes}}};
    absl::Status served;
    std::thread t([&] { served = ServeState(p.a, 1, StateChannel(3), src, quiet); });
    auto got = FetchState(p.b, 0, StateChannel(3), {3, 9}, quiet);
    t.join();
    REQUIRE_MESSAGE(got.ok(), got.status().ToString());
    CHECK_MESSAGE(served.ok(), served.ToString());
    CHECK(got->Find("params")->bytes == bytes);
  }
  flip.join();
}

}  // namespace
}  // namespace rt::cluster
