// TcpNode's observer handlers (status queries, data fetches): once a handler is
// replaced, no call of it runs any more, so its owner may be destroyed at once.
#include <doctest/doctest.h>

#include <atomic>
#include <memory>
#include <vector>

#include "absl/time/clock.h"
#include "net/net_test_util.h"
#include "net/tcp_node.h"

namespace rt::net {
namespace {

TcpNodeOptions Options(const std::vector<HostEntry>& hosts, int rank, bool observer) {
  TcpNodeOptions o;
  o.hosts = hosts;
  o.self_rank = observer ? 0 : rank;
  o.observer = observer;
  o.io_threads = observer ? 1 : 2;
  o.secret = "observer-test-secret-0123";
  o.fingerprint = {{"model", "tiny"}};
  o.handshake_timeout = absl::Seconds(5);
  o.socket_buffer_bytes = 0;
  return o;
}

}  // namespace

TEST_CASE("tcp node: clearing an observer handler waits for a call in progress") {
  // StatusResponder and DataServer clear their handler in their destructor, then free
  // what it captures. The node used to copy the handler under its lock and call it
  // after: a connection that arrived just then ran the handler on a freed owner.
  const std::vector<HostEntry> hosts = testing::LoopbackHosts(1);
  auto peer = TcpNode::Start(Options(hosts, 0, false));
  REQUIRE_MESSAGE(peer.ok(), peer.status().ToString());
  for (const uint64_t channel : {kObserverChannel, kDataFetchChannel}) {
    CAPTURE(channel);
    std::atomic<bool> entered{false}, running{false};
    auto handler = [&](std::shared_ptr<TcpConnection> conn) {
      entered = true;
      running = true;
      absl::SleepFor(absl::Milliseconds(300));  // a slow hand-off, widening the window
      running = false;
      conn->Close();
    };
    const bool status = channel == kObserverChannel;
    if (status) {
      (*peer)->SetObserverHandler(handler);
    } else {
      (*peer)->SetDataFetchHandler(handler);
    }
    auto observer = TcpNode::Start(Options(hosts, 0, true));
    REQUIRE_MESSAGE(observer.ok(), observer.status().ToString());
    std::shared_ptr<PendingLink> dial =
        (*observer)->ConnectTo(0, channel, absl::Now() + absl::Seconds(10));
    const absl::Time end = absl::Now() + absl::Seconds(10);
    while (!entered && absl::Now() < end) absl::SleepFor(absl::Milliseconds(2));
    REQUIRE(entered);
    if (status) {
      (*peer)->SetObserverHandler(nullptr);
    } else {
      (*peer)->SetDataFetchHandler(nullptr);
    }
    CHECK_FALSE(running);  // the call had ended before the handler was replaced
    dial->Cancel();
  }
}

}  // namespace rt::net
