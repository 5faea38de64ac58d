// TcpNode's run-time host list: peers identified by the endpoint in their hello,
// unlisted peers refused until SetHosts lists them, stable slots, removal.
#include <doctest/doctest.h>

#include <memory>
#include <string>
#include <vector>

#include "net/net_test_util.h"
#include "net/tcp_node.h"

namespace rt::net {
namespace {

constexpr uint64_t kChannel = 0x7e57;

TcpNodeOptions NodeOptions(const std::vector<HostEntry>& hosts, int rank) {
  TcpNodeOptions o;
  o.hosts = hosts;
  o.self_rank = rank;
  o.secret = "hosts-test-secret-0123";
  o.fingerprint = {{"model", "tiny"}};
  o.handshake_timeout = absl::Seconds(2);
  o.socket_buffer_bytes = 0;
  return o;
}

std::shared_ptr<TcpNode> StartNode(const std::vector<HostEntry>& hosts, int rank) {
  auto node = TcpNode::Start(NodeOptions(hosts, rank));
  REQUIRE_MESSAGE(node.ok(), node.status().ToString());
  return *node;
}

std::unique_ptr<Link> TakeLink(const std::shared_ptr<PendingLink>& p, absl::Duration wait) {
  REQUIRE_MESSAGE(p->Wait(wait), p->Describe());
  auto link = p->Take();
  REQUIRE_MESSAGE(link.ok(), link.status().ToString());
  return *std::move(link);
}

// One control frame each way proves the link carries data between the right peers.
void Exchange(Link& a, Link& b) {
  REQUIRE(a.connection().SendOwned(FrameType::kControl, std::vector<uint8_t>{1, 2, 3}).ok());
  std::vector<uint8_t> got;
  REQUIRE(b.connection().RecvControl(&got, absl::Seconds(5)).ok());
  CHECK(got == std::vector<uint8_t>{1, 2, 3});
}

bool Contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

}  // namespace

TEST_CASE("tcp node hosts: an unlisted peer is refused and keeps dialing until SetHosts lists it") {
  const std::vector<HostEntry> all = testing::LoopbackHosts(3);
  const std::vector<HostEntry> old_file = {all[0], all[1]};
  auto a = StartNode(old_file, 0);
  auto c = StartNode(all, 2);  // a new line of the file; `a` has not re-read it
  CHECK(a->RankOf(all[2].Endpoint()) == -1);

  auto dial = c->ConnectTo(0, kChannel, absl::Now() + absl::Seconds(20));
  // Refused, but not given up on: it may be listed once the edited file is agreed.
  const absl::Time until = absl::Now() + absl::Seconds(5);
  while (absl::Now() < until && !Contains(dial->Describe(), "is not in the hosts list of")) {
    absl::SleepFor(absl::Milliseconds(20));
  }
  CHECK_MESSAGE(Contains(dial->Describe(), "is not in the hosts list of"), dial->Describe());
  CHECK_FALSE(dial->Wait(absl::Milliseconds(300)));
  CHECK(a->AcceptFrom(2, kChannel, absl::Now() + absl::Seconds(1))->Wait(absl::Seconds(1)));

  REQUIRE(a->SetHosts(all).ok());
  const int slot = a->RankOf(all[2].Endpoint());
  CHECK(slot == 2);
  CHECK(a->num_hosts() == 3);
  CHECK(a->ActiveHosts().size() == 3);
  auto accepted = a->AcceptFrom(slot, kChannel, absl::Now() + absl::Seconds(10));
  auto from_c = TakeLink(accepted, absl::Seconds(10));
  auto to_a = TakeLink(dial, absl::Seconds(10));
  CHECK(from_c->peer_rank() == slot);
  CHECK(to_a->peer_rank() == 0);
  Exchange(*to_a, *from_c);
  // And the other direction: the node dials its new slot.
  auto back = a->ConnectTo(slot, kChannel + 1, absl::Now() + absl::Seconds(10));
  auto at_c = c->AcceptFrom(0, kChannel + 1, absl::Now() + absl::Seconds(10));
  auto l1 = TakeLink(back, absl::Seconds(10));
  auto l2 = TakeLink(at_c, absl::Seconds(10));
  Exchange(*l1, *l2);
}

TEST_CASE("tcp node hosts: peers are identified by endpoint, not by the rank in their own file") {
  const std::vector<HostEntry> h = testing::LoopbackHosts(2);
  auto a = StartNode({h[0], h[1]}, 0);  // a is rank 0 here
  auto b = StartNode({h[1], h[0]}, 0);  // and rank 1 in b's file (another order)
  auto dial = a->ConnectTo(1, kChannel, absl::Now() + absl::Seconds(10));
  auto wait = b->AcceptFrom(b->RankOf(h[0].Endpoint()), kChannel, absl::Now() + absl::Seconds(10));
  auto out = TakeLink(dial, absl::Seconds(10));
  auto in = TakeLink(wait, absl::Seconds(10));
  CHECK(in->peer_rank() == 1);
  Exchange(*out, *in);
}

TEST_CASE("tcp node hosts: removal fails waits and dials, refuses the peer -- re-adding restores") {
  const std::vector<HostEntry> h = testing::LoopbackHosts(3);
  auto a = StartNode(h, 0);
  auto b = StartNode(h, 1);
  auto waiting = a->AcceptFrom(1, kChannel, absl::Now() + absl::Seconds(30));

  REQUIRE(a->SetHosts({h[0], h[2]}).ok());
  CHECK(a->RankOf(h[1].Endpoint()) == -1);
  CHECK(a->RankOf(h[2].Endpoint()) == 2);  // slots are stable
  CHECK_FALSE(a->IsActive(1));
  CHECK(a->num_hosts() == 3);
  REQUIRE(waiting->Wait(absl::Seconds(2)));
  auto gone = waiting->Take();
  REQUIRE_FALSE(gone.ok());
  CHECK(absl::IsUnavailable(gone.status()));
  CHECK_MESSAGE(Contains(std::string(gone.status().message()), "removed"), gone.status());
  auto no_dial = a->ConnectTo(1, kChannel, absl::Now() + absl::Seconds(5));
  REQUIRE(no_dial->Wait(absl::Seconds(2)));
  CHECK_FALSE(no_dial->Take().ok());

  // b (which still lists a) is refused and keeps trying.
  auto dial = b->ConnectTo(0, kChannel, absl::Now() + absl::Seconds(20));
  CHECK_FALSE(dial->Wait(absl::Milliseconds(800)));
  CHECK_MESSAGE(Contains(dial->Describe(), "is not in the hosts list of"), dial->Describe());

  REQUIRE(a->SetHosts(h).ok());
  CHECK(a->RankOf(h[1].Endpoint()) == 1);  // its old slot back
  CHECK(a->num_hosts() == 3);
  auto in =
      TakeLink(a->AcceptFrom(1, kChannel, absl::Now() + absl::Seconds(10)), absl::Seconds(10));
  auto out = TakeLink(dial, absl::Seconds(10));
  Exchange(*out, *in);
}

TEST_CASE("tcp node hosts: a peer with the wrong secret is refused even when listed") {
  const std::vector<HostEntry> h = testing::LoopbackHosts(2);
  auto a = StartNode(h, 0);
  TcpNodeOptions o = NodeOptions(h, 1);
  o.secret = "another-secret-999999";
  auto bad = TcpNode::Start(o);
  REQUIRE(bad.ok());
  auto dial = (*bad)->ConnectTo(0, kChannel, absl::Now() + absl::Seconds(10));
  REQUIRE(dial->Wait(absl::Seconds(10)));
  auto link = dial->Take();
  REQUIRE_FALSE(link.ok());
  const bool fatal =
      absl::IsPermissionDenied(link.status()) || absl::IsFailedPrecondition(link.status());
  CHECK_MESSAGE(fatal, link.status());
  auto wait = a->AcceptFrom(1, kChannel, absl::Now() + absl::Milliseconds(500));
  REQUIRE(wait->Wait(absl::Seconds(3)));
  CHECK_FALSE(wait->Take().ok());
}

TEST_CASE("tcp node hosts: SetHosts validates and an error changes nothing") {
  const std::vector<HostEntry> h = testing::LoopbackHosts(3);
  auto a = StartNode({h[0], h[1]}, 0);
  auto missing_self = a->SetHosts({h[1], h[2]});
  CHECK(absl::IsInvalidArgument(missing_self));
  CHECK(Contains(std::string(missing_self.message()), "own endpoint"));
  CHECK(absl::IsInvalidArgument(a->SetHosts({h[0], h[2], h[2]})));
  TcpNodeOptions o = NodeOptions({h[0], h[1]}, 0);
  o.secret = "";
  o.hosts[0].port = testing::FreePorts(1)[0];
  auto open = TcpNode::Start(o);
  REQUIRE_MESSAGE(open.ok(), open.status().ToString());
  HostEntry remote = h[2];
  remote.host = remote.address = "10.1.2.3";
  remote.is_loopback = false;
  CHECK(absl::IsFailedPrecondition((*open)->SetHosts({o.hosts[0], remote})));
  CHECK((*open)->RankOf(remote.Endpoint()) == -1);
  CHECK(a->ActiveHosts().size() == 2);
  CHECK(a->RankOf(h[1].Endpoint()) == 1);
  CHECK(a->RankOf(h[2].Endpoint()) == -1);
}

}  // namespace rt::net
