// TcpRing over loopback: rings of 1..4 in threads, message order and integrity, ring
// order permutations and re-forming, and every rendezvous failure (wrong secret,
// differing config, strangers, a peer that never comes or dies, port in use).
#include "net/tcp_ring.h"

#include <arpa/inet.h>
#include <doctest/doctest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "core/clock.h"
#include "net_test_util.h"

namespace {

using rt::net::TcpRing;
using rt::net::TcpRingOptions;
using namespace rt::net::testing;

bool Contains(const absl::Status& s, const std::string& text) {
  return std::string(s.message()).find(text) != std::string::npos;
}

std::vector<std::unique_ptr<TcpRing>> RequireRings(
    std::vector<absl::StatusOr<std::unique_ptr<TcpRing>>> results) {
  std::vector<std::unique_ptr<TcpRing>> rings;
  for (auto& r : results) {
    INFO(r.status().ToString());
    REQUIRE(r.ok());
    rings.push_back(*std::move(r));
  }
  return rings;
}

// Every ring sends `count` messages to its successor and checks those from its
// predecessor, interleaving sends and receives (`interleave`) or sending all first.
void Exchange(std::vector<std::unique_ptr<TcpRing>>& rings, int count, bool interleave) {
  std::vector<std::string> errors(rings.size());
  std::vector<std::thread> threads;
  for (size_t p = 0; p < rings.size(); ++p) {
    threads.emplace_back([&, p] {
      TcpRing& ring = *rings[p];
      const int me = ring.host_rank();
      const int prev = ring.order()[(ring.rank() + ring.size() - 1) % ring.size()];
      std::vector<std::vector<uint8_t>> out;
      for (int i = 0; i < count; ++i) out.push_back(MessageFrom(me, i));
      std::vector<uint8_t> in;
      auto check = [&](int i) {
        absl::Status st = ring.RecvFromPrev(&in, absl::Seconds(30));
        if (!st.ok()) return errors[p] = st.ToString(), false;
        if (in != MessageFrom(prev, i))
          return errors[p] = "message " + std::to_string(i) + " differs", false;
        return true;
      };
      for (int i = 0; i < count; ++i) {
        absl::Status st = ring.SendToNext(out[i]);
        if (!st.ok()) return void(errors[p] = st.ToString());
        if (interleave && !check(i)) return;
      }
      if (!interleave) {
        for (int i = 0; i < count; ++i) {
          if (!check(i)) return;
        }
      }
      absl::Status st = ring.WaitSendsDone(absl::Seconds(30));
      if (!st.ok()) errors[p] = st.ToString();
    });
  }
  for (auto& t : threads) t.join();
  for (const auto& e : errors) CHECK_MESSAGE(e.empty(), e);
}

// Connects to 127.0.0.1:port, retrying while nobody listens yet; -1 on failure.
int ConnectRaw(uint16_t port, absl::Duration wait) {
  absl::Time deadline = absl::Now() + wait;
  while (absl::Now() < deadline) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0) return fd;
    close(fd);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return -1;
}

}  // namespace

TEST_CASE("tcp ring: N=3 and N=4 exchange large and small messages in order") {
  for (int n : {3, 4}) {
    CAPTURE(n);
    auto hosts = LoopbackHosts(n);
    std::vector<TcpRingOptions> opts;
    for (int r = 0; r < n; ++r) opts.push_back(RingOptions(hosts, r));
    auto rings = RequireRings(FormRings(opts));
    for (int r = 0; r < n; ++r) {
      CHECK(rings[r]->size() == n);
      CHECK(rings[r]->rank() == r);
    }
    Exchange(rings, 16, /*interleave=*/n == 3);
    Exchange(rings, 24, /*interleave=*/n != 3);  // more than fit in the receive queue
  }
}

TEST_CASE(
    "tcp ring: ring order is a caller-given permutation and rings re-form on the same nodes") {
  const int n = 4;
  auto hosts = LoopbackHosts(n);
  const std::vector<int> order = {2, 0, 3, 1};
  std::vector<TcpRingOptions> opts;
  for (int r = 0; r < n; ++r) {
    opts.push_back(RingOptions(hosts, r));
    opts.back().order = order;
  }
  auto rings = RequireRings(FormRings(opts));
  CHECK(rings[2]->rank() == 0);
  CHECK(rings[0]->rank() == 1);
  CHECK(rings[3]->rank() == 2);
  CHECK(rings[1]->rank() == 3);
  CHECK(rings[1]->next_link()->peer_rank() == 2);
  Exchange(rings, 8, true);

  // Re-form in another order on channel 1, reusing the nodes (as a probed ring order does).
  auto again = EmptyResults(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      again[r] = TcpRing::Form(rings[r]->node(), {0, 1, 2, 3}, 1, absl::Seconds(20));
    });
  }
  for (auto& t : threads) t.join();
  auto reformed = RequireRings(std::move(again));
  for (int r = 0; r < n; ++r) CHECK(reformed[r]->rank() == r);
  Exchange(reformed, 8, true);
  Exchange(rings, 8, true);  // the old ring still works alongside
}

TEST_CASE("tcp ring: a ring of one has no neighbours") {
  auto hosts = LoopbackHosts(1);
  auto ring = TcpRing::Create(RingOptions(hosts, 0));
  REQUIRE(ring.ok());
  CHECK((*ring)->size() == 1);
  CHECK((*ring)->WaitSendsDone(absl::Seconds(1)).ok());
  std::vector<uint8_t> m = {1};
  CHECK_FALSE((*ring)->SendToNext(m).ok());
  CHECK_FALSE((*ring)->RecvFromPrev(&m, absl::Milliseconds(1)).ok());
}

TEST_CASE("tcp ring: wrong secret is refused on both sides with a clear message") {
  auto hosts = LoopbackHosts(2);
  auto a = RingOptions(hosts, 0, absl::Seconds(4));
  auto b = RingOptions(hosts, 1, absl::Seconds(4));
  b.node.secret = "another-secret-0123456789";
  rt::Stopwatch watch;
  auto results = FormRings({a, b});
  CHECK(watch.ElapsedSeconds() < 10);
  for (auto& r : results) {
    REQUIRE_FALSE(r.ok());
    INFO(r.status().ToString());
    CHECK(Contains(r.status(), "shared secret"));
  }
}

TEST_CASE("tcp ring: differing fingerprint is refused, naming the key and both values") {
  auto hosts = LoopbackHosts(2);
  auto a = RingOptions(hosts, 0, absl::Seconds(4));
  auto b = RingOptions(hosts, 1, absl::Seconds(4));
  b.node.fingerprint[0].second = "layers=12 dim=8";
  auto results = FormRings({a, b});
  REQUIRE_FALSE(results[0].ok());
  REQUIRE_FALSE(results[1].ok());
  INFO(results[0].status().ToString());
  INFO(results[1].status().ToString());
  CHECK(Contains(results[0].status(), "model layers: here '2', there '12'"));
  CHECK(Contains(results[1].status(), "model layers: here '12', there '2'"));
  CHECK_FALSE(Contains(results[0].status(), "data:"));
}

TEST_CASE("tcp ring: different cluster ids are refused") {
  auto hosts = LoopbackHosts(2);
  auto a = RingOptions(hosts, 0, absl::Seconds(4));
  auto b = RingOptions(hosts, 1, absl::Seconds(4));
  b.node.cluster_id = "other-job";
  auto results = FormRings({a, b});
  REQUIRE_FALSE(results[0].ok());
  REQUIRE_FALSE(results[1].ok());
  INFO(results[0].status().ToString());
  INFO(results[1].status().ToString());
  CHECK(Contains(results[1].status(), "other-job"));
  CHECK(Contains(results[0].status(), "other-job"));
}

TEST_CASE("tcp ring: strangers sending garbage or nothing are refused and the ring still forms") {
  auto hosts = LoopbackHosts(2);
  std::atomic<bool> garbage_closed{false}, silent_closed{false};
  std::thread stranger([&] {
    int garbage = ConnectRaw(hosts[0].port, absl::Seconds(10));
    int silent = ConnectRaw(hosts[0].port, absl::Seconds(10));
    if (garbage < 0 || silent < 0) return;
    std::string junk = "GET / HTTP/1.1\r\nHost: x\r\n\r\n" + std::string(100, 'z');
    (void)!write(garbage, junk.data(), junk.size());
    char buf[4096];
    // The node must hang up on both (garbage: at once, silent: after the handshake timeout).
    while (read(garbage, buf, sizeof(buf)) > 0) {
    }
    garbage_closed = true;
    while (read(silent, buf, sizeof(buf)) > 0) {
    }
    silent_closed = true;
    close(garbage);
    close(silent);
  });
  auto a = RingOptions(hosts, 0);
  a.node.handshake_timeout = absl::Seconds(1);
  auto b = RingOptions(hosts, 1);
  auto results = EmptyResults(2);
  std::thread ta([&] { results[0] = TcpRing::Create(a); });
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // strangers arrive first
  std::thread tb([&] { results[1] = TcpRing::Create(b); });
  ta.join();
  tb.join();
  stranger.join();
  CHECK(garbage_closed);
  CHECK(silent_closed);
  auto rings = RequireRings(std::move(results));
  Exchange(rings, 8, true);
}

TEST_CASE("tcp ring: a peer that never comes gives a clear error after the wait") {
  auto hosts = LoopbackHosts(3);
  rt::Stopwatch watch;
  auto ring = TcpRing::Create(RingOptions(hosts, 0, absl::Milliseconds(1500)));
  double seconds = watch.ElapsedSeconds();
  REQUIRE_FALSE(ring.ok());
  INFO(ring.status().ToString());
  CHECK(absl::IsDeadlineExceeded(ring.status()));
  CHECK((Contains(ring.status(), "rank 1") || Contains(ring.status(), "rank 2")));
  CHECK(seconds >= 1.4);
  CHECK(seconds < 6);
}

TEST_CASE("tcp ring: a formation given up (cancelled) returns within a poll and keeps no node") {
  // The peers never come and the wait is long: only the cancel hook ends the
  // formation, and once it returned nothing of it holds the node any more.
  auto hosts = LoopbackHosts(3);
  auto node = rt::net::TcpNode::Start(RingOptions(hosts, 0, absl::Seconds(60)).node);
  REQUIRE(node.ok());
  std::weak_ptr<rt::net::TcpNode> weak = *node;
  std::atomic<bool> cancel{false};
  absl::StatusOr<std::unique_ptr<TcpRing>> ring = absl::UnknownError("not run");
  std::thread former([&, n = *std::move(node)]() mutable {
    ring = TcpRing::Form(std::move(n), {0, 1, 2}, /*channel=*/7, absl::Seconds(60),
                         absl::Seconds(5), [&] { return cancel.load(); });
  });
  absl::SleepFor(absl::Milliseconds(300));
  rt::Stopwatch watch;
  cancel = true;
  former.join();
  const double seconds = watch.ElapsedSeconds();
  INFO(ring.status().ToString());
  CHECK(absl::IsCancelled(ring.status()));
  CHECK(Contains(ring.status(), "given up"));
  CHECK(seconds < 1.0);
  CHECK(weak.expired());  // the node went with the formation's copy
}

TEST_CASE("tcp ring: port in use is a clear error") {
  auto hosts = LoopbackHosts(2);
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(hosts[0].port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0);
  REQUIRE(listen(fd, 1) == 0);
  auto ring = TcpRing::Create(RingOptions(hosts, 0, absl::Seconds(1)));
  close(fd);
  REQUIRE_FALSE(ring.ok());
  INFO(ring.status().ToString());
  CHECK(Contains(ring.status(), "already in use"));
  CHECK(Contains(ring.status(), std::to_string(hosts[0].port)));
}

TEST_CASE("tcp ring: a peer dying during rendezvous gives an error, no hang") {
  auto hosts = LoopbackHosts(2);
  // "Rank 1" accepts connections and drops them mid-handshake, again and again.
  std::atomic<bool> stop{false};
  int lfd = socket(AF_INET, SOCK_STREAM, 0);
  int one = 1;
  setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(hosts[1].port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(bind(lfd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0);
  REQUIRE(listen(lfd, 8) == 0);
  std::thread dying([&] {
    while (!stop) {
      timeval tv{0, 100000};
      fd_set set;
      FD_ZERO(&set);
      FD_SET(lfd, &set);
      if (select(lfd + 1, &set, nullptr, nullptr, &tv) <= 0) continue;
      int c = accept(lfd, nullptr, nullptr);
      if (c < 0) continue;
      char buf[64];
      (void)!read(c, buf, sizeof(buf));  // the hello header, then die
      close(c);
    }
  });
  rt::Stopwatch watch;
  auto ring = TcpRing::Create(RingOptions(hosts, 0, absl::Seconds(2)));
  stop = true;
  dying.join();
  close(lfd);
  REQUIRE_FALSE(ring.ok());
  INFO(ring.status().ToString());
  CHECK(watch.ElapsedSeconds() < 8);
  CHECK(Contains(ring.status(), "rank 1"));
}

TEST_CASE(
    "tcp ring: a neighbour leaving, an old epoch and a receive timeout end waits with errors") {
  auto hosts = LoopbackHosts(2);
  auto rings = RequireRings(FormRings({RingOptions(hosts, 0), RingOptions(hosts, 1)}));
  std::vector<uint8_t> m;
  auto timeout = rings[0]->RecvFromPrev(&m, absl::Milliseconds(50));
  CHECK(absl::IsDeadlineExceeded(timeout));

  SUBCASE("older epoch refused") {
    rings[0]->SetEpoch(5);
    std::vector<uint8_t> msg = {1, 2, 3};
    REQUIRE(rings[1]->SendToNext(msg).ok());  // carries epoch 0
    // msg must outlive the send; the link may already be failing, so the result varies.
    (void)rings[1]->WaitSendsDone(absl::Seconds(10));
    auto st = rings[0]->RecvFromPrev(&m, absl::Seconds(10));
    REQUIRE_FALSE(st.ok());
    CHECK(Contains(st, "older than the current epoch 5"));
    CHECK(Contains(st, "rank 1"));
  }
  SUBCASE("peer leaves") {
    rings[1].reset();
    rt::Stopwatch watch;
    auto st = rings[0]->RecvFromPrev(&m, absl::Seconds(10));
    REQUIRE_FALSE(st.ok());
    INFO(st.ToString());
    CHECK(watch.ElapsedSeconds() < 5);
    CHECK(Contains(st, "rank 1"));
  }
}
