// Control links over slow links: two peers that dial each other at the same moment
// must each keep the link they dialled, although a handshake takes a few round trips.
// A peer that is dialled while its own dial to the same peer is still connecting or
// handshaking must not cancel that dial: the peer has (or soon has) accepted it as
// its link from us, and closing it is a broken link to it.
#include <doctest/doctest.h>

#include <chrono>
#include <string>

#include "cluster/membership_service.h"
#include "cluster/service_test_util.h"
#include "net/delay_relay.h"

namespace rt::cluster {
namespace {

using testing::LoopbackCluster;
using testing::ServiceTimeouts;

using testing::kSlow;

TEST_CASE("two peers dialling each other at once over a 120 ms round trip keep their links") {
  // A round trip of 120 ms: a handshake ends ~300 ms (acceptor) and ~360 ms (dialer)
  // after the dial; the timeouts leave room for that.
  ServiceTimeouts t;
  t.heartbeat_interval_ms = 100;
  t.peer_timeout_ms = 1500;
  t.proposal_timeout_ms = 1500;
  t.startup_grace_ms = 600;
  LoopbackCluster c(2, t);
  const auto delay = std::chrono::milliseconds(60);  // one way
  net::testing::DelayRelay to0(c.hosts()[0].port, delay), to1(c.hosts()[1].port, delay);
  c.SetDialVia(0, {{c.Id(1), to1.via()}});
  c.SetDialVia(1, {{c.Id(0), to0.via()}});
  // Both start within a millisecond or two: their first dials run in step. Before the
  // fix each peer, on accepting the other's link, cancelled its own dial in mid-handshake;
  // the other saw that link close, redialled, and cancelled its own new dial in turn,
  // forever in step: no link stayed up, and no view formed.
  c.StartAll();
  const bool together = c.WaitTrainingTogether({0, 1}, absl::Seconds(10 * kSlow));
  REQUIRE_MESSAGE(together, c.Dump() << "connections through the relays: " << to0.connections()
                                     << " to peer 0, " << to1.connections() << " to peer 1");
  // Each peer dialled the other once or twice (a dial that lost a race may be redone),
  // not round after round.
  CHECK(to0.connections() <= 2);
  CHECK(to1.connections() <= 2);
  // And the links stay: still one view a second later, no new connection.
  const int before = to0.connections() + to1.connections();
  absl::SleepFor(absl::Seconds(1));
  CHECK(c.TrainingTogether({0, 1}));
  CHECK(to0.connections() + to1.connections() == before);
}

}  // namespace
}  // namespace rt::cluster
