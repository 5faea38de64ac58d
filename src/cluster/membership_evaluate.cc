// Membership's periodic evaluation (protocol in membership.h): after every event,
// suspicions, the agreed hosts file, leaving when removed, peers with other settings,
// the job's end, proposals, the pause reason, heartbeats and join requests.
#include "cluster/membership.h"

#include <algorithm>
#include <iterator>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace rt::cluster {

// ---- periodic evaluation ---------------------------------------------------------

void Membership::UpdateSuspicions(int64_t now_ms) {
  if (phase_ != Phase::kMember && phase_ != Phase::kChanging) return;
  for (const PeerId& m : view_.members) {
    if (m == cfg_.self) continue;
    const bool alive = IsAliveMember(m, now_ms);
    if (alive) {
      suspected_.erase(m);
      continue;
    }
    if (!suspected_.insert(m).second) continue;
    disrupted_ = true;
    std::string why;
    const PeerInfo& p = peers_[m];
    if (left_.count(m)) {
      why = "left the job";
    } else if (p.link_broken) {
      why = "link broken";
    } else if (now_ms < p.unresponsive_until_ms) {
      why = "did not answer a view proposal";
    } else if (p.last_heard_ms < 0) {
      why = "never heard from";
    } else {
      why = absl::StrFormat("silent for %d ms (peer timeout %d ms)", now_ms - p.last_heard_ms,
                            cfg_.peer_timeout_ms);
    }
    if (!left_.count(m)) Decide({Decision::kSuspect, m, why, {}, {}, false});
  }
}

void Membership::UpdateAgreedHosts() {
  if (cfg_.hosts == agreed_hosts_) return;
  // Every other member of the view (alive or not: a dead one reports nothing and
  // blocks agreement until it is out of the view) must report our fingerprint.
  for (const PeerId& m : view_.members) {
    if (m == cfg_.self) continue;
    auto it = peers_.find(m);
    if (it == peers_.end() || !it->second.have_heartbeat ||
        it->second.last_heartbeat.hosts_fingerprint != hosts_fp_) {
      return;
    }
  }
  if (view_.empty() && phase_ != Phase::kForming) return;
  agreed_hosts_ = cfg_.hosts;
}

void Membership::UpdatePause(int64_t now_ms) {
  std::string reason;
  int kind = 0;  // a new kPause decision only when the kind of reason changes
  switch (phase_) {
    case Phase::kForming: {
      std::vector<PeerId> alive;
      for (const PeerId& h : agreed_hosts_) {
        if (IsAlive(h, now_ms)) alive.push_back(h);
      }
      kind = 1;
      if (!HasQuorum(alive, agreed_hosts_, cfg_.min_peers, &reason)) {
        reason += RefusedSummary();
        break;
      }
      kind = 2;
      reason = absl::StrFormat("forming the first view: %d of %d hosts reachable", alive.size(),
                               agreed_hosts_.size());
      break;
    }
    case Phase::kJoining:
      kind = 3;
      reason = absl::StrFormat("waiting to be admitted to the view of epoch %d (leader %s)",
                               known_view_.epoch, known_view_.leader());
      break;
    case Phase::kChanging:
      kind = 4;
      reason = absl::StrFormat("view change to epoch %d proposed by %s in progress",
                               promised_epoch_, promised_to_);
      break;
    case Phase::kLeft:
      kind = 5;
      reason = "left the job";
      break;
    case Phase::kMember: {
      kind = 1;
      if (!HasQuorum(AliveMembers(now_ms), agreed_hosts_, cfg_.min_peers, &reason)) {
        reason += RefusedSummary();
        break;
      }
      kind = 0;
      if (!suspected_.empty() || disrupted_) {
        kind = 6;
        std::vector<PeerId> s(suspected_.begin(), suspected_.end());
        reason = s.empty() ? "ring disrupted: waiting for a new view"
                           : absl::StrCat("ring disrupted (unreachable: ", absl::StrJoin(s, " "),
                                          "): waiting for a new view");
      }
      break;
    }
  }
  if (reason.empty()) kind = 0;
  const bool announce = kind != pause_kind_ && !reason.empty() && phase_ != Phase::kChanging &&
                        phase_ != Phase::kLeft;
  pause_reason_ = reason;
  pause_kind_ = kind;
  if (announce) Decide({Decision::kPause, "", reason, {}, {}, false});
}

void Membership::SendHeartbeats(int64_t now_ms) {
  if (last_heartbeat_ms_ >= 0 && now_ms - last_heartbeat_ms_ < cfg_.heartbeat_interval_ms) return;
  last_heartbeat_ms_ = now_ms;
  Heartbeat hb;
  hb.view = view_;
  hb.state = state_;
  hb.hosts_fingerprint = hosts_fp_;
  hb.training = CanTrain();
  hb.disrupted = disrupted_;
  hb.suspects.assign(suspected_.begin(), suspected_.end());
  std::set<PeerId> to(cfg_.hosts.begin(), cfg_.hosts.end());
  to.insert(agreed_hosts_.begin(), agreed_hosts_.end());
  to.insert(view_.members.begin(), view_.members.end());
  for (const PeerId& p : to) Send(p, hb);
}

void Membership::SendJoinRequest(int64_t now_ms) {
  if (phase_ != Phase::kJoining || known_view_.empty()) return;
  if (last_join_request_ms_ >= 0 && now_ms - last_join_request_ms_ < cfg_.heartbeat_interval_ms) {
    return;
  }
  last_join_request_ms_ = now_ms;
  for (const PeerId& m : known_view_.members) Send(m, JoinRequest{state_, hosts_fp_});
}

void Membership::LeaveIfRemoved(int64_t now_ms) {
  if (phase_ != Phase::kMember) return;
  if (RankOf(agreed_hosts_, cfg_.self) >= 0) {
    // Our own file no longer lists us, but we could not see every member agree: they
    // may have agreed, installed a view without us and dropped our links before
    // their heartbeats with the new file reached us. Once no other member of our
    // view is alive and we cannot train, nobody is left to tell us: leave.
    if (RankOf(cfg_.hosts, cfg_.self) >= 0 || CanTrain()) return;
    for (const PeerId& m : view_.members) {
      if (m != cfg_.self && IsAlive(m, now_ms)) return;
    }
  }
  if (!(at_step_boundary_ || !CanTrain())) return;
  for (const PeerId& m : view_.members) Send(m, Leave{"left: removed from the hosts file"});
  phase_ = Phase::kLeft;
  Decide({Decision::kLeave,
          "",
          "removed from the hosts file: leaving at a step boundary",
          {},
          {},
          false});
}

std::string Membership::RefusedSummary() const {
  std::vector<std::string> parts;
  for (const auto& [peer, r] : refused_) {
    parts.push_back(absl::StrFormat("%s (%s)", peer, r.difference));
  }
  return parts.empty() ? ""
                       : absl::StrCat("; refused for other settings: ", absl::StrJoin(parts, "; "));
}

void Membership::CheckSettings(int64_t now_ms) {
  for (auto it = refused_.begin(); it != refused_.end();) {
    it = now_ms - it->second.last_ms > cfg_.refusal_ttl_ms ? refused_.erase(it) : std::next(it);
  }
  if (phase_ != Phase::kForming || settings_refused_ || refused_.empty()) return;
  // Groups of the hosts that answered, by settings. Like the first view, wait for
  // every host of the file, or for the grace.
  bool everyone = true;
  std::vector<PeerId> mine;  // this peer and every host heard from
  std::map<uint64_t, std::vector<PeerId>> others;
  for (const PeerId& h : agreed_hosts_) {
    auto r = refused_.find(h);
    if (h == cfg_.self || IsAlive(h, now_ms)) {
      mine.push_back(h);
    } else if (r != refused_.end()) {
      others[r->second.config].push_back(h);
    } else {
      everyone = false;
    }
  }
  if (!everyone && now_ms - start_ms_ < cfg_.startup_grace_ms) return;
  // The settings that stay: those of the most peers, on a tie the lowest-ranked one's.
  auto beats = [this](const std::vector<PeerId>& a, const std::vector<PeerId>& b) {
    if (a.size() != b.size()) return a.size() > b.size();
    return RankLess(SortedByRank(a).front(), SortedByRank(b).front());
  };
  const std::vector<PeerId>* stays = &mine;
  for (const auto& [config, group] : others) {
    if (beats(group, *stays)) stays = &group;
  }
  if (stays == &mine) return;
  settings_refused_ = true;
  const std::vector<PeerId> them = SortedByRank(*stays);
  Decide(
      {Decision::kConfigMismatch,
       them.front(),
       absl::StrFormat("this peer's settings differ from those of %s (%d %s against %d with "
                       "this peer's%s), so this peer leaves; what differs: %s",
                       absl::StrJoin(them, " "), them.size(), them.size() == 1 ? "peer" : "peers",
                       mine.size(),
                       them.size() == mine.size() ? "; on a tie the lowest-ranked peer's stay" : "",
                       refused_[them.front()].difference),
       {},
       {},
       false});
}

void Membership::Evaluate(int64_t now_ms) {
  if (phase_ == Phase::kLeft) return;
  if (job_end_step_ >= 0 && view_.Contains(cfg_.self)) {
    // Every member stops after job_end_step_: nothing to suspect, propose or pause for.
    SendHeartbeats(now_ms);
    return;
  }
  CheckSettings(now_ms);
  UpdateSuspicions(now_ms);
  UpdateAgreedHosts();
  LeaveIfRemoved(now_ms);
  if (phase_ == Phase::kLeft) return;
  CheckProposalTimeout(now_ms);
  // A promise whose proposer died or never committed is released.
  if (phase_ == Phase::kChanging && promised_to_ != cfg_.self &&
      (!IsAlive(promised_to_, now_ms) || now_ms - promised_ms_ > 3 * cfg_.proposal_timeout_ms)) {
    RevertPhase();
  }
  // A joiner whose target view has no live member that still holds it starts over
  // (forming a view among the hosts that are alive).
  if (phase_ == Phase::kJoining) {
    bool any = false;
    for (const PeerId& m : known_view_.members) {
      if (m == cfg_.self || !IsAlive(m, now_ms)) continue;
      const PeerInfo& info = peers_[m];
      any = any || (info.have_heartbeat && info.last_heartbeat.view.epoch == known_view_.epoch);
    }
    if (!any) {
      known_view_ = View{};
      phase_ = Phase::kForming;
      start_ms_ = now_ms;
    }
  }
  MaybePropose(now_ms);
  UpdatePause(now_ms);
  SendHeartbeats(now_ms);
  SendJoinRequest(now_ms);
}

}  // namespace rt::cluster
