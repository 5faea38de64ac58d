// TcpNode dials: PendingLink::CancelIfBackingOff cancels a dial only between two
// attempts, never while its connection is open (connecting or handshaking): closing
// that connection would break a link the peer may already have accepted.
#include <doctest/doctest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <memory>
#include <vector>

#include "net/net_test_util.h"
#include "net/tcp_node.h"

namespace rt::net {
namespace {

constexpr uint64_t kChannel = 0x7e58;

std::shared_ptr<TcpNode> StartNode(const std::vector<HostEntry>& hosts, int rank) {
  TcpNodeOptions o;
  o.hosts = hosts;
  o.self_rank = rank;
  o.secret = "dial-test-secret-0123";
  o.fingerprint = {{"model", "tiny"}};
  o.handshake_timeout = absl::Seconds(2);
  o.socket_buffer_bytes = 0;
  auto node = TcpNode::Start(o);
  REQUIRE_MESSAGE(node.ok(), node.status().ToString());
  return *node;
}

TEST_CASE("tcp node dial: CancelIfBackingOff cancels between attempts, never in a handshake") {
  const std::vector<HostEntry> hosts = testing::LoopbackHosts(2);
  auto node = StartNode(hosts, 0);

  // Nobody listens on peer 1's port: each attempt is refused and the dial backs off.
  auto refused = node->ConnectTo(1, kChannel, absl::Now() + absl::Seconds(10));
  bool cancelled = false;
  for (const absl::Time end = absl::Now() + absl::Seconds(5); !cancelled && absl::Now() < end;) {
    cancelled = refused->CancelIfBackingOff();
    if (!cancelled) absl::SleepFor(absl::Milliseconds(1));
  }
  REQUIRE_MESSAGE(cancelled, refused->Describe());
  REQUIRE(refused->Wait(absl::ZeroDuration()));
  CHECK(absl::IsCancelled(refused->Take().status()));
  CHECK_FALSE(refused->CancelIfBackingOff());  // done: nothing left to cancel

  // A listener that never answers: the kernel completes the TCP connect, and the dial
  // waits in its handshake (up to the 2 s handshake timeout): not cancellable.
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(hosts[1].port);
  REQUIRE(bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0);
  REQUIRE(listen(fd, 8) == 0);
  auto silent = node->ConnectTo(1, kChannel, absl::Now() + absl::Seconds(10));
  int refusals = 0;
  for (const absl::Time end = absl::Now() + absl::Milliseconds(500); absl::Now() < end;) {
    if (silent->CancelIfBackingOff()) ++refusals;
    absl::SleepFor(absl::Milliseconds(1));
  }
  CHECK(refusals == 0);
  CHECK_FALSE(silent->Wait(absl::ZeroDuration()));
  CHECK(silent->Describe().find("connecting to") == 0);
  silent->Cancel();
  close(fd);
}

}  // namespace
}  // namespace rt::net
