// TcpRing::BeginDriving / EndDriving (TcpConnection sessions): the caller's thread
// does the links' socket I/O inside its waits, and hands the sockets back to the io
// threads mid-frame (a write or read half done) without losing or reordering a byte;
// frames other threads queue or wait for meanwhile still move; failing a link from
// another thread wakes a driven wait at once and the peer sees the end.
#include <doctest/doctest.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "core/clock.h"
#include "net/tcp_ring.h"
#include "net_test_util.h"

namespace {

using rt::net::FrameType;
using rt::net::TcpRing;
using namespace rt::net::testing;

// Bigger than the loopback socket buffers, so sends and receives stop mid-frame.
#ifdef RINGTRAIN_SANITIZED
constexpr size_t kBig = 1 << 20;
#else
constexpr size_t kBig = 3 << 20;
#endif
constexpr int kMessages = 5;

std::vector<uint8_t> Pattern(size_t n, int seed) {
  std::vector<uint8_t> m(n);
  for (size_t k = 0; k < n; ++k) m[k] = static_cast<uint8_t>(seed * 31 + k * 13 + (k >> 9));
  return m;
}

std::vector<std::unique_ptr<TcpRing>> TwoRings() {
  auto hosts = LoopbackHosts(2);
  auto results = FormRings({RingOptions(hosts, 0), RingOptions(hosts, 1)});
  std::vector<std::unique_ptr<TcpRing>> rings;
  for (auto& r : results) {
    INFO(r.status().ToString());
    REQUIRE(r.ok());
    rings.push_back(*std::move(r));
  }
  return rings;
}

TEST_CASE("tcp ring: a driven session and the io threads take over from each other mid-frame") {
  auto rings = TwoRings();
  std::vector<std::vector<uint8_t>> out;
  for (int i = 0; i < kMessages; ++i) out.push_back(Pattern(kBig + i, i));
  const std::vector<uint8_t> control = {7, 1, 7};
  // Round 0: ring 0 sends, ring 1 receives; round 1 the other way round.
  for (int round = 0; round < 2; ++round) {
    INFO("round " << round);
    TcpRing* sender = rings[round].get();
    TcpRing* receiver = rings[1 - round].get();
    absl::Status send_status, recv_status, control_status;
    std::vector<std::vector<uint8_t>> got(kMessages);
    std::vector<uint8_t> control_got;
    std::thread send([&] {
      sender->BeginDriving();
      for (const auto& m : out) {
        send_status = sender->SendToNext(m);
        if (!send_status.ok()) return;
      }
      // Drives for a moment only: the session ends with a frame half written.
      (void)sender->WaitSendsDone(absl::Milliseconds(5));
      // Queued by another thread during the session: written by it or after it.
      std::thread other([&] {
        (void)sender->next_link()->connection().SendOwned(FrameType::kControl, control);
      });
      other.join();
      sender->EndDriving();
      send_status = sender->WaitSendsDone(absl::Seconds(20));  // the io thread finishes
    });
    std::thread receive([&] {
      // Another thread waits for the control frame the session reads.
      std::thread other([&] {
        control_status =
            receiver->prev_link()->connection().RecvControl(&control_got, absl::Seconds(20));
      });
      receiver->BeginDriving();
      for (int i = 0; i < 2 && recv_status.ok(); ++i) {
        recv_status = receiver->RecvFromPrev(&got[i], absl::Seconds(20));
      }
      receiver->EndDriving();  // the next frame is likely half read: the io thread goes on
      for (int i = 2; i < kMessages && recv_status.ok(); ++i) {
        recv_status = receiver->RecvFromPrev(&got[i], absl::Seconds(20));
      }
      other.join();
    });
    send.join();
    receive.join();
    INFO(send_status.ToString() << " / " << recv_status.ToString() << " / "
                                << control_status.ToString());
    REQUIRE(send_status.ok());
    REQUIRE(recv_status.ok());
    REQUIRE(control_status.ok());
    for (int i = 0; i < kMessages; ++i) CHECK(got[i] == out[i]);
    CHECK(control_got == control);
  }
  // Driven both ways at once, as an allreduce does: each side sends and receives.
  std::vector<absl::Status> status(2);
  std::vector<std::thread> both;
  for (int p = 0; p < 2; ++p) {
    both.emplace_back([&, p] {
      rings[p]->BeginDriving();
      std::vector<uint8_t> in;
      for (int i = 0; i < kMessages && status[p].ok(); ++i) {
        status[p] = rings[p]->SendToNext(out[i]);
        if (status[p].ok()) status[p] = rings[p]->RecvFromPrev(&in, absl::Seconds(20));
        if (status[p].ok() && in != out[i]) status[p] = absl::DataLossError("wrong bytes");
      }
      if (status[p].ok()) status[p] = rings[p]->WaitSendsDone(absl::Seconds(20));
      rings[p]->EndDriving();
    });
  }
  for (auto& t : both) t.join();
  for (const absl::Status& st : status) {
    INFO(st.ToString());
    CHECK(st.ok());
  }
}

TEST_CASE("tcp ring: failing a link from another thread wakes a driven wait, the peer sees it") {
  auto rings = TwoRings();
  rings[0]->BeginDriving();
  std::thread failer([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    rings[0]->prev_link()->connection().Fail(absl::AbortedError("stopped by the test"));
  });
  rt::Stopwatch watch;
  std::vector<uint8_t> msg;
  absl::Status st = rings[0]->RecvFromPrev(&msg, absl::Seconds(20));
  failer.join();
  CHECK(watch.ElapsedSeconds() < 5);
  INFO(st.ToString());
  CHECK(!st.ok());
  CHECK(StatusText(st).find("stopped by the test") != std::string::npos);
  rings[0]->EndDriving();
  // The session shut the socket down at once: the predecessor's link ends too.
  absl::Status peer;
  while (watch.ElapsedSeconds() < 10) {
    peer = rings[1]->next_link()->connection().status();
    if (!peer.ok()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  INFO(peer.ToString());
  CHECK(!peer.ok());
  // After the session the link stays failed and further calls return at once.
  CHECK(!rings[0]->RecvFromPrev(&msg, absl::Seconds(20)).ok());
  CHECK(watch.ElapsedSeconds() < 10);
}

}  // namespace
