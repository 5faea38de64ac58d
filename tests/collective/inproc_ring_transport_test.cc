// In-process ring transport: ordering, wrap-around, timeouts, closed peers.
#include "net/inproc_ring_transport.h"

#include <doctest/doctest.h>

#include <thread>

#include "core/clock.h"

namespace rt::net {
namespace {

std::vector<uint8_t> Bytes(std::initializer_list<int> v) {
  std::vector<uint8_t> out;
  for (int x : v) out.push_back(static_cast<uint8_t>(x));
  return out;
}

TEST_CASE("in-process ring delivers messages to the successor in order") {
  auto ring = MakeInProcessRing(3);
  REQUIRE(ring.size() == 3);
  for (int i = 0; i < 3; ++i) {
    CHECK(ring[i]->rank() == i);
    CHECK(ring[i]->size() == 3);
  }
  std::vector<std::vector<uint8_t>> sent;
  for (int m = 0; m < 100; ++m) sent.push_back(Bytes({m, m + 1, m + 2}));
  std::vector<uint8_t> empty;
  std::thread sender([&] {
    for (auto& m : sent) CHECK(ring[2]->SendToNext(m).ok());  // 2 -> 0 wraps around
    CHECK(ring[2]->SendToNext(empty).ok());
    CHECK(ring[2]->WaitSendsDone(absl::Seconds(5)).ok());
  });
  std::vector<uint8_t> got;
  for (int m = 0; m < 100; ++m) {
    REQUIRE(ring[0]->RecvFromPrev(&got, absl::Seconds(5)).ok());
    CHECK(got == sent[m]);
  }
  REQUIRE(ring[0]->RecvFromPrev(&got, absl::Seconds(5)).ok());
  CHECK(got.empty());
  sender.join();
}

TEST_CASE("in-process ring receive times out with a message naming the peers") {
  auto ring = MakeInProcessRing(2);
  std::vector<uint8_t> got;
  Stopwatch watch;
  absl::Status s = ring[1]->RecvFromPrev(&got, absl::Milliseconds(50));
  CHECK(s.code() == absl::StatusCode::kDeadlineExceeded);
  CHECK(s.message().find("peer 0") != std::string::npos);
  CHECK(watch.ElapsedMs() >= 45);
  CHECK(watch.ElapsedMs() < 2000);
}

TEST_CASE("in-process ring reports a closed predecessor after draining its messages") {
  auto ring = MakeInProcessRing(3);
  REQUIRE(ring[0]->SendToNext(Bytes({7})).ok());
  ring[0].reset();  // peer 0 dies
  std::vector<uint8_t> got;
  REQUIRE(ring[1]->RecvFromPrev(&got, absl::Seconds(5)).ok());
  CHECK(got == Bytes({7}));
  absl::Status s = ring[1]->RecvFromPrev(&got, absl::Seconds(5));
  CHECK(s.code() == absl::StatusCode::kUnavailable);
  // Peer 2's successor is gone too.
  CHECK(ring[2]->SendToNext(Bytes({1})).code() == absl::StatusCode::kUnavailable);
}

TEST_CASE("in-process ring wakes a blocked receiver when the predecessor closes") {
  auto ring = MakeInProcessRing(2);
  std::thread closer([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    ring[0].reset();
  });
  std::vector<uint8_t> got;
  Stopwatch watch;
  absl::Status s = ring[1]->RecvFromPrev(&got, absl::Seconds(10));
  closer.join();
  CHECK(s.code() == absl::StatusCode::kUnavailable);
  CHECK(watch.ElapsedMs() < 5000);
}

TEST_CASE("in-process ring of one peer has no neighbours") {
  auto ring = MakeInProcessRing(1);
  CHECK(ring[0]->size() == 1);
  CHECK(!ring[0]->SendToNext(Bytes({1})).ok());
  CHECK(ring[0]->WaitSendsDone(absl::Seconds(1)).ok());
}

}  // namespace
}  // namespace rt::net

namespace rt::net {
namespace {

TEST_CASE("zero-copy ring: WaitSendsDone returns only after the successor took the bytes") {
  InProcessRingOptions options;
  options.zero_copy = true;
  auto ring = MakeInProcessRing(2, options);
  std::vector<uint8_t> payload = {1, 2, 3};
  REQUIRE(ring[0]->SendToNext(payload).ok());
  // Nobody receives: the wait times out with a message saying what is pending.
  absl::Status s = ring[0]->WaitSendsDone(absl::Milliseconds(30));
  CHECK(s.code() == absl::StatusCode::kDeadlineExceeded);
  CHECK(s.message().find("did not take 1 queued") != std::string::npos);
  std::thread receiver([&] {
    std::vector<uint8_t> got;
    CHECK(ring[1]->RecvFromPrev(&got, absl::Seconds(5)).ok());
    CHECK(got == std::vector<uint8_t>({1, 2, 3}));
  });
  CHECK(ring[0]->WaitSendsDone(absl::Seconds(5)).ok());
  receiver.join();
  payload[0] = 9;  // allowed now: the message was taken
}

}  // namespace
}  // namespace rt::net
