// Dropping a TcpRing while a message it queued is still being written: SendToNext does
// not copy, so the ring must stop reading the caller's bytes before its destructor
// returns (the caller reuses them at once: the next step's gradients, a round's
// contribution redone among the survivors of a view change).
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <vector>

#include "core/clock.h"
#include "net/tcp_ring.h"
#include "net_test_util.h"

using namespace rt::net::testing;

TEST_CASE("tcp ring: once dropped, a ring reads none of the bytes queued on it") {
  // Peer 1 takes no message and queues at most one, so after a first small message its
  // link stops reading, and peer 0's writer is stuck inside a message far larger than
  // the loopback socket buffers when peer 0 drops its ring. ~Link only posts the close
  // to the io thread: a ring that returned then left the writer reading the message for
  // a while, and the caller, overwriting it, raced the writer (bytes sent no longer
  // matching the frame's checksum). After ~TcpRing the connection must be closed, which
  // WaitSendsDone reports without waiting: any result but DeadlineExceeded says that no
  // write reads the caller's bytes any more.
  const auto hosts = LoopbackHosts(2);
  std::vector<rt::net::TcpRingOptions> options = {RingOptions(hosts, 0), RingOptions(hosts, 1)};
  options[1].node.link.max_queued_messages = 1;
  auto rings = FormRings(options);
  REQUIRE_MESSAGE(rings[0].ok(), rings[0].status().ToString());
  REQUIRE_MESSAGE(rings[1].ok(), rings[1].status().ToString());
  std::shared_ptr<rt::net::TcpConnection> conn =
      (*rings[0])->next_link()->connection().shared_from_this();

  const std::vector<uint8_t> first(1, uint8_t{1});
  std::vector<uint8_t> bytes(64 << 20, uint8_t{0x5A});
  REQUIRE((*rings[0])->SendToNext(first).ok());
  REQUIRE((*rings[0])->SendToNext(bytes).ok());
  CHECK(absl::IsDeadlineExceeded((*rings[0])->WaitSendsDone(absl::Milliseconds(200))));
  rt::Stopwatch watch;
  rings[0] = absl::UnknownError("dropped");
  const double drop_s = watch.ElapsedSeconds();
  const absl::Status after = conn->WaitSendsDone(absl::ZeroDuration());
  std::fill(bytes.begin(), bytes.end(), uint8_t{0xEE});  // the caller reuses its buffer
  MESSAGE("ring dropped in ", drop_s, " s; then WaitSendsDone: ", after.ToString());
  CHECK_FALSE(after.ok());  // the message was never sent whole
  CHECK_FALSE(absl::IsDeadlineExceeded(after));
  CHECK(drop_s < 5.0);  // the close waits for the io thread, not for a timeout

  // Peer 1 gets the first message, then sees the link closed mid-message, never a
  // message of changed bytes.
  std::vector<uint8_t> in;
  REQUIRE((*rings[1])->RecvFromPrev(&in, absl::Seconds(10)).ok());
  CHECK(in == first);
  const absl::Status got = (*rings[1])->RecvFromPrev(&in, absl::Seconds(10));
  CHECK_FALSE(got.ok());
  CHECK_FALSE(absl::IsDataLoss(got));
}
