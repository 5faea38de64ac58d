// Link probing that ends early with its bandwidth stream still queued: a malformed
// request from the peer, an abort (a view change) while streaming. Rank 0 runs
// ProbeLinks (the dialer); rank 1 plays the acceptor's side of the protocol by hand
// (link_probe.cc's messages) and then stops reading, so the dialer's writer thread is
// blocked mid-stream in sendmsg() on the probe's payload buffer when the probe fails.
// The probe must not free that buffer before the link's socket is closed: under
// AddressSanitizer (CI's unit-test stage) a write reading it after it was freed is a
// heap-use-after-free in the sendmsg interceptor and fails this test.
#include <doctest/doctest.h>

#include <chrono>
#include <cstring>
#include <deque>
#include <thread>

#include "../net/net_test_util.h"
#include "collective/link_probe.h"
#include "core/clock.h"
#include "loopback_rings.h"

namespace {

using namespace rt::collective;
using rt::net::Link;
using rt::net::TcpRing;
using rt::net::TcpRingOptions;
using namespace rt::net::testing;
using rt::collective::testing::MakeRings;

// link_probe.cc's message tags (the first byte of every probe message).
constexpr uint8_t kGo = 1, kPing = 2, kPong = 3, kStream = 4, kRtt = 6, kDigest = 8;

// Stream frames of a little less than 1 MiB: the acceptor's reader pauses after 17 of
// them (16 MiB queued), inside the dialer's second write batch of 16 frames, so the
// dialer's writer is blocked with part of that batch already written.
constexpr uint64_t kChunk = (uint64_t{1} << 20) - 4096;
constexpr uint64_t kChunks = 256;  // 256 MB: far more than the stall point

ProbeOptions FailureProbeOptions() {
  ProbeOptions o;
  o.pings = 2;
  o.timeout = absl::Seconds(20);  // no wait here should take it
  return o;
}

// The acceptor of the probe's only pair, by hand: GO, the dialer's digest, the
// pings, the RTT, then a request for kChunks stream frames of kChunk bytes (and,
// with `then_invalid`, at once a second request the dialer must refuse). Reads
// nothing after that. The sent messages stay in *sent (SendData does not copy them).
absl::Status FakeAcceptor(rt::net::TcpNode& node, const ProbeOptions& options, bool then_invalid,
                          std::unique_ptr<Link>* link_out, std::deque<std::vector<uint8_t>>* sent) {
  auto pending = node.AcceptFrom(0, options.channel, absl::Now() + options.timeout);
  if (!pending->Wait(options.timeout)) return absl::DeadlineExceededError("no probe link");
  auto link = pending->Take();
  if (!link.ok()) return link.status();
  *link_out = *std::move(link);
  rt::net::TcpConnection& conn = (*link_out)->connection();
  auto send = [&](std::vector<uint8_t> m) {
    sent->push_back(std::move(m));
    return conn.SendData(sent->back(), 0);
  };
  auto expect = [&](uint8_t tag, size_t size, std::vector<uint8_t>* m) {
    absl::Status st = conn.RecvData(m, options.timeout);
    if (st.ok() && (m->size() != size || (*m)[0] != tag)) {
      st = absl::DataLossError("unexpected probe message with tag " + std::to_string((*m)[0]));
    }
    return st;
  };
  std::vector<uint8_t> go(9, 0), m;  // digest 0: no known matrix, measure the link
  go[0] = kGo;
  if (absl::Status st = send(go); !st.ok()) return st;
  if (absl::Status st = expect(kDigest, 9, &m); !st.ok()) return st;
  const size_t ping_bytes = std::max<size_t>(options.ping_bytes, 9);
  for (int i = 0; i <= options.pings; ++i) {
    if (absl::Status st = expect(kPing, ping_bytes, &m); !st.ok()) return st;
    m[0] = kPong;
    if (absl::Status st = send(m); !st.ok()) return st;
  }
  if (absl::Status st = expect(kRtt, 9, &m); !st.ok()) return st;
  std::vector<uint8_t> request(17);
  request[0] = kStream;
  const uint64_t ask[2] = {kChunks, kChunk};
  std::memcpy(request.data() + 1, ask, sizeof(ask));
  if (absl::Status st = send(request); !st.ok()) return st;
  if (then_invalid) {
    const uint64_t bad[2] = {0, kChunk};  // zero chunks: refused
    std::memcpy(request.data() + 1, bad, sizeof(bad));
    if (absl::Status st = send(request); !st.ok()) return st;
  }
  return absl::OkStatus();
}

// Closes the fake's link once nothing it sent is read any more.
void CloseFake(std::unique_ptr<Link>& link) {
  if (!link) return;
  link->connection().Close();
  const absl::Status st = link->connection().WaitSendsDone(absl::Seconds(10));
  CHECK_FALSE(absl::IsDeadlineExceeded(st));
  link.reset();
}

}  // namespace

TEST_CASE("link probe: a refused request mid-stream fails the probe with its sends still queued") {
  auto rings = MakeRings(2);
  const ProbeOptions options = FailureProbeOptions();
  std::unique_ptr<Link> fake_link;
  std::deque<std::vector<uint8_t>> fake_sent;
  absl::Status fake = absl::UnknownError("not run");
  std::thread acceptor([&] {
    fake = FakeAcceptor(*rings[1]->node(), options, /*then_invalid=*/true, &fake_link, &fake_sent);
  });
  rt::Stopwatch watch;
  auto st = ProbeLinks(*rings[0]->node(), *rings[0], options);
  acceptor.join();
  INFO(fake.ToString());
  CHECK(fake.ok());
  REQUIRE_FALSE(st.ok());
  INFO(st.status().ToString());
  CHECK(absl::IsDataLoss(st.status()));
  CHECK(StatusText(st.status()).find("rank 1") != std::string::npos);
  CHECK(StatusText(st.status()).find("invalid stream") != std::string::npos);
  CHECK(watch.ElapsedSeconds() < 10);  // the stream was never waited for
  CloseFake(fake_link);
}

TEST_CASE("link probe: Abort while the bandwidth stream is queued ends the probe promptly") {
  auto rings = MakeRings(2);
  ProbeOptions options = FailureProbeOptions();
  AbortSignal abort;
  options.abort = &abort;
  std::unique_ptr<Link> fake_link;
  std::deque<std::vector<uint8_t>> fake_sent;
  absl::Status fake = absl::UnknownError("not run");
  std::thread acceptor([&] {
    fake = FakeAcceptor(*rings[1]->node(), options, /*then_invalid=*/false, &fake_link, &fake_sent);
    if (!fake.ok()) return;
    // The dialer is queueing or has queued the stream and now waits for the rate.
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    abort.Abort(absl::AbortedError("view changed"));
  });
  rt::Stopwatch watch;
  auto st = ProbeLinks(*rings[0]->node(), *rings[0], options);
  acceptor.join();
  INFO(fake.ToString());
  CHECK(fake.ok());
  REQUIRE_FALSE(st.ok());
  CHECK(StatusText(st.status()) == "view changed");
  CHECK(watch.ElapsedSeconds() < 10);  // not the 20 s receive timeout
  CloseFake(fake_link);
}
