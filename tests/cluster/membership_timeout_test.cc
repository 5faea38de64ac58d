// Failure timeouts adapted to a link (AdaptivePeerTimeoutMs, Membership::SetPeerTimeout):
// the formula's floor, growth with the retransmission timeout and cap; and a peer whose
// limit was raised stays alive through a silence the default would suspect, and is
// suspected once the raised limit has passed.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "cluster/membership.h"

namespace rt::cluster {
namespace {

TEST_CASE("adaptive peer timeout: floor, heartbeat + 7 RTOs, cap") {
  CHECK(AdaptivePeerTimeoutMs(-1, 300, 3000) == 3000);      // RTO unknown: --peer-timeout
  CHECK(AdaptivePeerTimeoutMs(204, 300, 3000) == 3000);     // loopback: the floor
  CHECK(AdaptivePeerTimeoutMs(300, 300, 3000) == 3000);     // 100 ms RTT: 2.4 s < floor
  CHECK(AdaptivePeerTimeoutMs(600, 300, 3000) == 4500);     // long, jittery RTT
  CHECK(AdaptivePeerTimeoutMs(5000, 300, 3000) == 10000);   // capped: a dead peer is found
  CHECK(AdaptivePeerTimeoutMs(5000, 300, 20000) == 20000);  // a larger --peer-timeout wins
}

TEST_CASE("a raised peer timeout keeps a silent peer alive until it has passed") {
  const std::vector<PeerId> hosts = {"10.0.0.1:29500", "10.0.0.2:29500"};
  auto config = [&](const PeerId& self) {
    MembershipConfig c;
    c.self = self;
    c.hosts = hosts;
    c.peer_timeout_ms = 3000;
    c.heartbeat_interval_ms = 300;
    c.startup_grace_ms = 500;
    return c;
  };
  Membership a(config(hosts[0]), 0), b(config(hosts[1]), 0);
  int64_t t = 0;
  for (; t <= 1500; t += 50) {  // both talk: b is heard
    a.OnTick(t);
    b.OnTick(t);
    for (Outgoing& o : a.TakeOutgoing())
      if (o.to == hosts[1]) b.OnEnvelope(o.envelope, t);
    for (Outgoing& o : b.TakeOutgoing())
      if (o.to == hosts[0]) a.OnEnvelope(o.envelope, t);
  }
  const int64_t silent_from = t;  // b says nothing more
  REQUIRE(a.IsAlive(hosts[1], silent_from));
  CHECK(a.PeerTimeoutMs(hosts[1]) == 3000);
  CHECK_FALSE(a.IsAlive(hosts[1], silent_from + 3500));  // the default suspects it
  a.SetPeerTimeout(hosts[1], 6000);
  CHECK(a.PeerTimeoutMs(hosts[1]) == 6000);
  CHECK(a.IsAlive(hosts[1], silent_from + 5500));
  CHECK_FALSE(a.IsAlive(hosts[1], silent_from + 6100));
  a.SetPeerTimeout("10.0.0.9:1", 6000);  // an unknown peer: ignored
  CHECK(a.PeerTimeoutMs("10.0.0.9:1") == 3000);
}

}  // namespace
}  // namespace rt::cluster
