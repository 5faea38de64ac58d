// Helpers for socket-level cluster tests: N MembershipServices on loopback nodes in
// one process, with kill (close every socket), restart and partition (drop traffic),
// and hosts files that name only some of the cluster's endpoints (growth, shrinking).
#pragma once

#include <doctest/doctest.h>

#include <algorithm>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "cluster/membership_service.h"
#include "net/net_test_util.h"
#include "net/tcp_node.h"

namespace rt::cluster::testing {

// Sanitizers run the io threads several times slower: time bounds are scaled by this.
#ifdef RINGTRAIN_SANITIZED
inline constexpr double kSlow = 3;
#else
inline constexpr double kSlow = 1;
#endif

// Short timeouts so that every scenario ends within a few seconds.
struct ServiceTimeouts {
  int64_t peer_timeout_ms = 300;
  int64_t heartbeat_interval_ms = 50;
  int64_t proposal_timeout_ms = 250;
  int64_t startup_grace_ms = 600;
};

inline net::TcpNodeOptions LoopbackNodeOptions(const std::vector<net::HostEntry>& hosts, int rank) {
  net::TcpNodeOptions o;
  o.hosts = hosts;
  o.self_rank = rank;
  o.secret = "cluster-test-secret-0123";
  o.fingerprint = {{"model", "tiny"}};
  o.handshake_timeout = absl::Seconds(2);
  o.io_threads = 2;
  o.socket_buffer_bytes = 0;
  return o;
}

class LoopbackCluster {
 public:
  LoopbackCluster(int n, ServiceTimeouts t = {})
      : t_(t), hosts_(net::testing::LoopbackHosts(n)), start_file_(hosts_) {
    peers_.resize(n);
  }
  ~LoopbackCluster() {
    for (size_t i = 0; i < peers_.size(); ++i) Kill(static_cast<int>(i));
  }

  int size() const { return static_cast<int>(peers_.size()); }
  const std::vector<net::HostEntry>& hosts() const { return hosts_; }
  PeerId Id(int i) const { return hosts_[i].Endpoint(); }
  std::vector<PeerId> Ids(const std::vector<int>& who) const {
    std::vector<PeerId> ids;
    for (int i : who) ids.push_back(Id(i));
    return ids;
  }
  // The hosts file of the peers started from now on: these entries, in this order
  // (default: all of the cluster's endpoints).
  void SetStartFile(const std::vector<int>& who) {
    start_file_.clear();
    for (int i : who) start_file_.push_back(hosts_[i]);
  }
  // Peers started from now on dial through relays: TcpNodeOptions::dial_via of peer i.
  void SetDialVia(int i, std::vector<std::pair<std::string, std::string>> via) {
    peers_[i].dial_via = std::move(via);
  }
  MembershipService& S(int i) { return *peers_[i].service; }
  const std::shared_ptr<net::TcpNode>& Node(int i) { return peers_[i].node; }
  bool Live(int i) const { return peers_[i].service != nullptr; }

  void Start(int i, StateVersion state = {0, 0}) {
    auto self = std::find_if(start_file_.begin(), start_file_.end(),
                             [&](const net::HostEntry& h) { return h.Endpoint() == Id(i); });
    REQUIRE_MESSAGE(self != start_file_.end(), "peer " << i << " is not in the start file");
    net::TcpNodeOptions node_options =
        LoopbackNodeOptions(start_file_, static_cast<int>(self - start_file_.begin()));
    node_options.dial_via = peers_[i].dial_via;
    auto node = net::TcpNode::Start(std::move(node_options));
    REQUIRE_MESSAGE(node.ok(), node.status().ToString());
    MembershipServiceOptions o;
    o.node = *node;
    o.peer_timeout_ms = t_.peer_timeout_ms;
    o.heartbeat_interval_ms = t_.heartbeat_interval_ms;
    o.proposal_timeout_ms = t_.proposal_timeout_ms;
    o.startup_grace_ms = t_.startup_grace_ms;
    o.initial_epoch = state.epoch;
    o.initial_state = state;
    auto s = MembershipService::Start(std::move(o));
    REQUIRE_MESSAGE(s.ok(), s.status().ToString());
    peers_[i].node = *node;
    peers_[i].service = *std::move(s);
  }
  void StartAll() {
    for (int i = 0; i < size(); ++i) Start(i);
  }
  // As kill -9 looks from outside: every socket of the peer closes.
  void Kill(int i) {
    if (peers_[i].service) peers_[i].service->Stop();
    peers_[i].service.reset();
    peers_[i].node.reset();
  }
  // Two sides that cannot hear each other (links stay open, traffic is dropped).
  void Partition(const std::set<int>& side) {
    for (int i = 0; i < size(); ++i) {
      if (!Live(i)) continue;
      std::set<PeerId> blocked;
      for (int j = 0; j < size(); ++j) {
        if (side.count(i) != side.count(j)) blocked.insert(Id(j));
      }
      S(i).SetBlockedPeers(blocked);
    }
  }
  void Heal() {
    for (int i = 0; i < size(); ++i) {
      if (Live(i)) S(i).SetBlockedPeers({});
    }
  }

  // Waits until every peer of `who` trains in one view of exactly `who`.
  bool WaitTrainingTogether(const std::vector<int>& who, absl::Duration timeout) {
    const absl::Time end = absl::Now() + timeout;
    while (absl::Now() < end) {
      if (TrainingTogether(who)) return true;
      absl::SleepFor(absl::Milliseconds(2));
    }
    return TrainingTogether(who);
  }
  bool TrainingTogether(const std::vector<int>& who) {
    View v0 = S(who[0]).view();
    if (v0.members.size() != who.size()) return false;
    for (int i : who) {
      if (!Live(i) || !S(i).CanTrain() || S(i).view() != v0 || !v0.Contains(Id(i))) return false;
    }
    return true;
  }
  std::string Dump() {
    std::string s;
    for (int i = 0; i < size(); ++i) {
      s += Id(i) + ": ";
      if (!Live(i)) {
        s += "dead\n";
        continue;
      }
      s += S(i).view().ToString() + " train " + std::to_string(S(i).CanTrain()) + " pause '" +
           S(i).pause_reason() + "'\n";
    }
    return s;
  }

 private:
  struct Peer {
    std::shared_ptr<net::TcpNode> node;
    std::unique_ptr<MembershipService> service;
    std::vector<std::pair<std::string, std::string>> dial_via;
  };
  ServiceTimeouts t_;
  std::vector<net::HostEntry> hosts_;
  std::vector<net::HostEntry> start_file_;
  std::vector<Peer> peers_;
};

}  // namespace rt::cluster::testing
