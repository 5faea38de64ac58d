// MembershipService's thread-safe calls (see membership_service.h): the snapshot the
// trainer and the status pages read, the decision queue, the trainer's events (posted
// to the control thread) and the status reports. The links and the control thread are
// in membership_service.cc.
#include "cluster/membership_service.h"

#include <chrono>

#include "core/clock.h"
#include "core/log.h"
#include "net/hosts_file.h"

namespace rt::cluster {

// ---------------------------------------------------------------- snapshot API

View MembershipService::view() const {
  std::lock_guard<std::mutex> lock(mu_);
  return view_;
}
bool MembershipService::CanTrain() const {
  std::lock_guard<std::mutex> lock(mu_);
  return can_train_;
}
std::string MembershipService::pause_reason() const {
  std::lock_guard<std::mutex> lock(mu_);
  return pause_reason_;
}
Membership::Phase MembershipService::phase() const {
  std::lock_guard<std::mutex> lock(mu_);
  return phase_;
}
std::vector<PeerId> MembershipService::agreed_hosts() const {
  std::lock_guard<std::mutex> lock(mu_);
  return agreed_hosts_;
}

std::optional<Decision> MembershipService::NextDecision(absl::Duration timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  state_cv_.wait_for(lock, absl::ToChronoNanoseconds(timeout),
                     [&] { return !decisions_.empty() || stopped_; });
  if (decisions_.empty()) return std::nullopt;
  Decision d = std::move(decisions_.front());
  decisions_.pop_front();
  return d;
}

bool MembershipService::ViewSuperseded() const {
  std::lock_guard<std::mutex> lock(mu_);
  // A settings mismatch too: this peer exits once it handles it.
  for (const Decision& d : decisions_) {
    if (EndsView(d.kind) || d.kind == Decision::kConfigMismatch) return true;
  }
  return false;
}

bool MembershipService::WaitFor(const std::function<bool(const View&, bool)>& pred,
                                absl::Duration timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  return state_cv_.wait_for(lock, absl::ToChronoNanoseconds(timeout), [&] {
    return stopped_ || pred(view_, can_train_);
  }) && !stopped_;
}

std::optional<View> MembershipService::WaitUntilTraining(absl::Duration timeout) {
  if (!WaitFor([](const View& v, bool t) { return t && !v.empty(); }, timeout)) {
    return std::nullopt;
  }
  return view();
}

void MembershipService::StepCompleted(StateVersion state) {
  Event e{Event::kStep, {}, {}, state, {}, {}};
  Post(std::move(e));
}
void MembershipService::SetState(StateVersion state) {
  Post(Event{Event::kSetState, {}, {}, state, {}, {}});
}
void MembershipService::StateTransferFailed(StateVersion state) {
  Post(Event{Event::kTransferFailed, {}, {}, state, {}, {}});
}
void MembershipService::HostsChanged(std::vector<PeerId> hosts) {
  Post(Event{Event::kHosts, {}, {}, {}, std::move(hosts), {}});
}
absl::Status MembershipService::HostsFileChanged(const std::string& path) {
  absl::StatusOr<std::vector<net::HostEntry>> hosts = net::LoadHostsFile(path);
  if (!hosts.ok()) return hosts.status();
  std::vector<PeerId> ids;
  for (const auto& h : *hosts) ids.push_back(h.Endpoint());
  LogInfo("re-read hosts file %s: %d entries [%s]", path, ids.size(), PeerNames(ids));
  HostsChanged(std::move(ids));
  return absl::OkStatus();
}
void MembershipService::Leave(const std::string& reason, int64_t last_step) {
  Post(Event{Event::kLeave, {}, {}, StateVersion{0, last_step}, {}, reason});
  // Drain() publishes the phase after it handed the Leave envelopes to the links.
  std::unique_lock<std::mutex> lock(mu_);
  state_cv_.wait_for(lock, std::chrono::seconds(2),
                     [&] { return stopped_ || phase_ == Membership::Phase::kLeft; });
}

void MembershipService::SetLocalReport(std::vector<uint8_t> report) {
  std::lock_guard<std::mutex> lock(mu_);
  if (report.size() > kMaxReportBytes) {
    if (!report_too_large_warned_) {
      LogWarning("status report of %d bytes exceeds %d: not sent", report.size(), kMaxReportBytes);
      report_too_large_warned_ = true;
    }
    return;
  }
  local_report_ = std::move(report);
  ++local_report_version_;
}

std::vector<RemoteReport> MembershipService::PeerReports() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<RemoteReport> out = peer_reports_;
  const int64_t now = NowMs();
  for (RemoteReport& r : out) {
    auto it = received_reports_.find(r.peer);
    if (it == received_reports_.end()) continue;
    r.report = it->second.bytes;
    r.age_ms = now - it->second.received_ms;
  }
  return out;
}

void MembershipService::SetBlockedPeers(std::set<PeerId> peers) {
  std::lock_guard<std::mutex> lock(mu_);
  blocked_ = std::move(peers);
}

bool MembershipService::Blocked(const PeerId& peer) const {
  std::lock_guard<std::mutex> lock(mu_);
  return blocked_.count(peer) > 0;
}

int MembershipService::RankOfPeer(const PeerId& peer) const {
  for (size_t r = 0; r < node_peers_.size(); ++r) {
    if (node_peers_[r] != peer) continue;
    if (static_cast<int>(r) == node_->self_rank() || (r < out_.size() && out_[r])) {
      return static_cast<int>(r);
    }
  }
  return -1;
}

void MembershipService::Post(Event e) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopped_) return;
    events_.push_back(std::move(e));
  }
  cv_.notify_all();
}

}  // namespace rt::cluster
