// TcpNode's slot table: hosts-file ranks and their endpoints (PeerName, RankOf, Host,
// ActiveHosts), and SetHosts, which applies an edited hosts file: slots of removed hosts
// go inactive (their waits fail, their unclaimed connections close), new hosts get new
// slots, a returning host its old one. Moved out of tcp_node.cc.
#include <algorithm>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "core/log.h"
#include "net/tcp_node.h"
#include "net/tcp_node_impl.h"

namespace rt::net {

namespace {

// Moves the values of `links` (keyed by (rank, channel)) whose rank is in `ranks` into
// `out` and erases them: the links of hosts that left the hosts file.
template <typename Map, typename Value>
void TakeEntriesOfRanks(Map& links, const std::set<int>& ranks, std::vector<Value>& out) {
  for (auto it = links.begin(); it != links.end();) {
    if (!ranks.count(it->first.first)) {
      ++it;
      continue;
    }
    out.push_back(it->second);
    it = links.erase(it);
  }
}

}  // namespace

std::string TcpNode::PeerName(int rank) const {
  std::lock_guard<std::mutex> lock(impl_->hosts_mu);
  if (rank < 0 || rank >= static_cast<int>(impl_->slots.size())) {
    return absl::StrFormat("rank %d", rank);
  }
  return absl::StrFormat("rank %d (%s)", rank, impl_->slots[rank].host.Endpoint());
}

int TcpNode::num_hosts() const {
  std::lock_guard<std::mutex> lock(impl_->hosts_mu);
  return static_cast<int>(impl_->slots.size());
}

int TcpNode::RankOf(const std::string& endpoint) const {
  std::lock_guard<std::mutex> lock(impl_->hosts_mu);
  for (size_t i = 0; i < impl_->slots.size(); ++i) {
    if (impl_->slots[i].active && impl_->slots[i].host.Endpoint() == endpoint) {
      return static_cast<int>(i);
    }
  }
  return -1;
}

bool TcpNode::IsActive(int rank) const {
  std::lock_guard<std::mutex> lock(impl_->hosts_mu);
  return rank >= 0 && rank < static_cast<int>(impl_->slots.size()) && impl_->slots[rank].active;
}

HostEntry TcpNode::Host(int rank) const {
  std::lock_guard<std::mutex> lock(impl_->hosts_mu);
  if (rank < 0 || rank >= static_cast<int>(impl_->slots.size())) return HostEntry{};
  return impl_->slots[rank].host;
}

std::vector<HostEntry> TcpNode::ActiveHosts() const {
  std::lock_guard<std::mutex> lock(impl_->hosts_mu);
  std::vector<HostEntry> out;
  for (const auto& s : impl_->slots) {
    if (s.active) out.push_back(s.host);
  }
  return out;
}

absl::Status TcpNode::SetHosts(const std::vector<HostEntry>& hosts) {
  std::set<std::string> seen;
  for (const HostEntry& h : hosts) {
    if (!seen.insert(h.Endpoint()).second) {
      return absl::InvalidArgumentError(
          absl::StrFormat("the new host list names %s twice", h.Endpoint()));
    }
  }
  if (!seen.count(self_endpoint_)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "the new host list must contain this peer's own endpoint %s", self_endpoint_));
  }
  if (options_.secret.empty() && !AllLoopback(hosts)) {
    return absl::FailedPreconditionError(
        "a shared secret is required unless every host is loopback (--secret-file or "
        "RINGTRAIN_SECRET): the new host list names a non-loopback host");
  }
  std::set<int> removed;
  std::vector<std::string> added_names, removed_names;
  {
    std::lock_guard<std::mutex> lock(impl_->hosts_mu);
    auto& slots = impl_->slots;
    for (size_t i = 0; i < slots.size(); ++i) {
      if (slots[i].active && !seen.count(slots[i].host.Endpoint())) {
        slots[i].active = false;
        removed.insert(static_cast<int>(i));
        removed_names.push_back(slots[i].host.Endpoint());
      }
    }
    for (const HostEntry& h : hosts) {
      auto it = std::find_if(slots.begin(), slots.end(), [&](const Impl::Slot& s) {
        return s.host.Endpoint() == h.Endpoint();
      });
      if (it == slots.end()) {
        slots.push_back({h, true});
        added_names.push_back(h.Endpoint());
        continue;
      }
      if (!it->active) added_names.push_back(h.Endpoint());
      it->host = h;
      it->active = true;
    }
  }
  std::vector<std::shared_ptr<PendingLink>> waits;
  std::vector<std::shared_ptr<TcpConnection>> unclaimed;
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    TakeEntriesOfRanks(impl_->waiting, removed, waits);
    TakeEntriesOfRanks(impl_->arrived, removed, unclaimed);
    for (int r : removed) impl_->refusals.erase(r);
    impl_->unlisted_warned.clear();
  }
  for (auto& w : waits) {
    w->Fulfil(absl::UnavailableError(
        absl::StrFormat("%s was removed from this peer's hosts list", PeerName(w->peer_rank_))));
  }
  for (auto& c : unclaimed) c->Close();
  if (!added_names.empty() || !removed_names.empty()) {
    LogInfo("host list changed: added [%s], removed [%s]", absl::StrJoin(added_names, " "),
            absl::StrJoin(removed_names, " "));
  }
  return absl::OkStatus();
}

}  // namespace rt::net
