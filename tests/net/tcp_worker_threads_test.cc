// The two data paths of an established link (LinkOptions::worker_threads): frames
// read and written by the io thread through Asio, or by the connection's own reader
// and writer threads with blocking calls. Both must carry the same messages, pause
// reading on a full queue, and shut down without hanging when their threads are
// blocked in the kernel.
#include <doctest/doctest.h>

#include <chrono>
#include <cstdint>
#include <thread>
#include <vector>

#include "core/clock.h"
#include "net/tcp_node.h"
#include "net/tcp_ring.h"
#include "net_test_util.h"

using namespace rt::net::testing;

namespace {

std::vector<rt::net::TcpRingOptions> TwoPeers(bool worker_threads, size_t max_queued = 64) {
  auto hosts = LoopbackHosts(2);
  std::vector<rt::net::TcpRingOptions> options = {RingOptions(hosts, 0), RingOptions(hosts, 1)};
  for (auto& o : options) {
    o.node.link.worker_threads = worker_threads;
    o.node.link.max_queued_messages = max_queued;
  }
  return options;
}

}  // namespace

TEST_CASE("tcp link threads: the Asio and the worker-thread path carry the same messages") {
  for (bool workers : {false, true}) {
    CAPTURE(workers);
    auto rings = FormRings(TwoPeers(workers));
    REQUIRE(rings[0].ok());
    REQUIRE(rings[1].ok());
    constexpr int kMessages = 64;  // every size of MessageFrom 8 times
    std::vector<std::vector<uint8_t>> sent[2];
    for (int p = 0; p < 2; ++p)
      for (int m = 0; m < kMessages; ++m) sent[p].push_back(MessageFrom(p, m));
    std::vector<std::string> errors(2);
    std::vector<int> received(2, 0);
    std::vector<std::thread> threads;
    for (int p = 0; p < 2; ++p) {
      threads.emplace_back([&, p] {
        auto& ring = **rings[p];
        std::vector<uint8_t> in;
        for (int m = 0; m < kMessages; ++m) {
          absl::Status st = ring.SendToNext(sent[p][m]);
          if (st.ok()) st = ring.RecvFromPrev(&in, absl::Seconds(30));
          if (!st.ok()) return void(errors[p] = st.ToString());
          if (in != sent[1 - p][m]) return void(errors[p] = "message " + std::to_string(m));
          ++received[p];
        }
        absl::Status st = ring.WaitSendsDone(absl::Seconds(30));
        if (!st.ok()) errors[p] = st.ToString();
      });
    }
    for (auto& t : threads) t.join();
    CHECK(errors[0] == "");
    CHECK(errors[1] == "");
    CHECK(received[0] == kMessages);
    CHECK(received[1] == kMessages);
  }
}

TEST_CASE("tcp link threads: reading pauses on a full queue and resumes in order") {
  // Two queued messages at most: the reader stops while the receiver sleeps, and
  // every message still arrives, in order, once it takes them.
  auto rings = FormRings(TwoPeers(/*worker_threads=*/true, /*max_queued=*/2));
  REQUIRE(rings[0].ok());
  REQUIRE(rings[1].ok());
  constexpr int kMessages = 100;
  std::vector<std::vector<uint8_t>> sent;  // valid until the sends are done
  for (int m = 0; m < kMessages; ++m) sent.push_back(MessageFrom(0, m + 1));
  for (int m = 0; m < kMessages; ++m) REQUIRE((*rings[0])->SendToNext(sent[m]).ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  std::vector<uint8_t> in;
  for (int m = 0; m < kMessages; ++m) {
    absl::Status st = (*rings[1])->RecvFromPrev(&in, absl::Seconds(30));
    INFO(st.ToString());
    REQUIRE(st.ok());
    REQUIRE(in == sent[m]);
  }
  CHECK((*rings[0])->WaitSendsDone(absl::Seconds(30)).ok());
}

TEST_CASE("tcp link threads: a peer that stops reading, then dies, ends blocked sends at once") {
  // Peer 1 never reads: peer 0's writer blocks in send() once the socket buffers are
  // full and peer 1's reader pauses. Destroying peer 1 must not hang on its blocked
  // threads, and peer 0's wait must end with the link's error, not its timeout.
#ifdef RINGTRAIN_SANITIZED
  const size_t kBytes = size_t{16} << 20;
#else
  const size_t kBytes = size_t{64} << 20;
#endif
  auto rings = FormRings(TwoPeers(/*worker_threads=*/true, /*max_queued=*/2));
  REQUIRE(rings[0].ok());
  REQUIRE(rings[1].ok());
  std::vector<uint8_t> big(kBytes / 16, 0x5a);
  for (int m = 0; m < 16; ++m) REQUIRE((*rings[0])->SendToNext(big).ok());
  absl::Status st = (*rings[0])->WaitSendsDone(absl::Milliseconds(300));
  CHECK(absl::IsDeadlineExceeded(st));  // blocked: the peer reads nothing

  rt::Stopwatch watch;
  rings[1] = absl::UnknownError("destroyed");  // closes its links, joins its threads
  CHECK(watch.ElapsedSeconds() < 5.0);
  watch.Restart();
  st = (*rings[0])->WaitSendsDone(absl::Seconds(30));
  CHECK_FALSE(st.ok());
  CHECK_FALSE(absl::IsDeadlineExceeded(st));
  CHECK(watch.ElapsedSeconds() < 5.0);
  watch.Restart();
  rings[0] = absl::UnknownError("destroyed");
  CHECK(watch.ElapsedSeconds() < 5.0);
}

TEST_CASE("tcp link threads: sends that race with the hand-over to the threads are delivered") {
  // The io thread pauses in the middle of handing each established socket to its
  // threads, while both users already send on the link they were given. Every frame
  // must arrive: none may start an Asio write on the socket being handed over.
  auto hosts = LoopbackHosts(2);
  std::vector<std::shared_ptr<rt::net::TcpNode>> nodes;
  for (int r = 0; r < 2; ++r) {
    rt::net::TcpNodeOptions o = RingOptions(hosts, r).node;
    o.link.handover_pause = absl::Milliseconds(100);
    auto node = rt::net::TcpNode::Start(o);
    REQUIRE_MESSAGE(node.ok(), node.status().ToString());
    nodes.push_back(*node);
  }
  constexpr int kMessages = 4;
  for (uint64_t channel = 0x4a0; channel < 0x4a3; ++channel) {
    CAPTURE(channel);
    std::vector<std::string> errors(2);
    std::vector<std::thread> threads;
    rt::Stopwatch watch;
    for (int p = 0; p < 2; ++p) {
      threads.emplace_back([&, p] {
        const absl::Time deadline = absl::Now() + absl::Seconds(10);
        auto pending = p == 0 ? nodes[0]->ConnectTo(1, channel, deadline)
                              : nodes[1]->AcceptFrom(0, channel, deadline);
        if (!pending->Wait(absl::Seconds(10))) return void(errors[p] = pending->Describe());
        auto link = pending->Take();
        if (!link.ok()) return void(errors[p] = link.status().ToString());
        auto& conn = (*link)->connection();
        std::vector<std::vector<uint8_t>> out;
        for (int m = 0; m < kMessages; ++m) out.push_back(MessageFrom(p, m));
        for (int m = 0; m < kMessages; ++m) {
          absl::Status st = conn.SendData(out[m], 0);
          if (!st.ok()) return void(errors[p] = st.ToString());
        }
        std::vector<uint8_t> in;
        for (int m = 0; m < kMessages; ++m) {
          absl::Status st = conn.RecvData(&in, absl::Seconds(5));
          if (!st.ok()) return void(errors[p] = st.ToString());
          if (in != MessageFrom(1 - p, m)) return void(errors[p] = "message " + std::to_string(m));
        }
        absl::Status st = conn.WaitSendsDone(absl::Seconds(5));
        if (!st.ok()) errors[p] = st.ToString();
      });
    }
    for (auto& t : threads) t.join();
    CHECK(errors[0] == "");
    CHECK(errors[1] == "");
    CHECK(watch.ElapsedSeconds() < 5.0);
  }
}
