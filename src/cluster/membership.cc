// Membership state machine (protocol in membership.h).
#include "cluster/membership.h"

#include <algorithm>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace rt::cluster {

const char* DecisionKindName(Decision::Kind kind) {
  switch (kind) {
    case Decision::kSuspect:
      return "suspect";
    case Decision::kStopTraining:
      return "stop-training";
    case Decision::kPause:
      return "pause";
    case Decision::kInstallView:
      return "install-view";
    case Decision::kExcluded:
      return "excluded";
    case Decision::kLeave:
      return "leave";
    case Decision::kWarning:
      return "warning";
  }
  return "?";
}

Membership::Membership(MembershipConfig config, int64_t now_ms)
    : cfg_(std::move(config)),
      agreed_hosts_(cfg_.hosts),
      hosts_fp_(HostsFingerprint(cfg_.hosts)),
      start_ms_(now_ms),
      state_(cfg_.initial_state),
      max_epoch_seen_(cfg_.initial_epoch),
      promised_epoch_(0) {
  Evaluate(now_ms);
}

// ---- helpers ---------------------------------------------------------------------

int Membership::Rank(const PeerId& p) const {
  const int r = RankOf(cfg_.hosts, p);
  if (r >= 0) return r;
  // Not in the current file (removed): after every listed host, in agreed-file order.
  const int a = RankOf(agreed_hosts_, p);
  return a >= 0 ? 1000000 + a : std::numeric_limits<int>::max();
}

bool Membership::RankLess(const PeerId& a, const PeerId& b) const {
  const int ra = Rank(a), rb = Rank(b);
  return ra != rb ? ra < rb : a < b;
}

std::vector<PeerId> Membership::SortedByRank(std::vector<PeerId> peers) const {
  std::sort(peers.begin(), peers.end(),
            [this](const PeerId& a, const PeerId& b) { return RankLess(a, b); });
  peers.erase(std::unique(peers.begin(), peers.end()), peers.end());
  return peers;
}

bool Membership::IsAlive(const PeerId& peer, int64_t now_ms) const {
  if (peer == cfg_.self) return phase_ != Phase::kLeft;
  if (left_.count(peer)) return false;
  auto it = peers_.find(peer);
  if (it == peers_.end()) return false;
  const PeerInfo& p = it->second;
  return p.last_heard_ms >= 0 && now_ms - p.last_heard_ms <= cfg_.peer_timeout_ms &&
         !p.link_broken && now_ms >= p.unresponsive_until_ms;
}

bool Membership::IsAliveMember(const PeerId& member, int64_t now_ms) const {
  if (IsAlive(member, now_ms)) return true;
  // A peer that just entered the view (a restarted joiner) may not have heard from
  // every member yet: their links to it are still connecting. The proposer heard
  // from all of them, so a member not heard from yet is silent only from the
  // install on, and suspected after peer_timeout_ms like any other silence.
  if (left_.count(member) || now_ms - install_ms_ > cfg_.peer_timeout_ms) return false;
  auto it = peers_.find(member);
  if (it == peers_.end()) return true;
  const PeerInfo& p = it->second;
  return p.last_heard_ms < 0 && !p.link_broken && now_ms >= p.unresponsive_until_ms;
}

std::vector<PeerId> Membership::AliveMembers(int64_t now_ms) const {
  std::vector<PeerId> alive;
  for (const PeerId& m : view_.members) {
    if (IsAliveMember(m, now_ms)) alive.push_back(m);
  }
  return alive;
}

bool Membership::BallotBeats(uint64_t epoch, const PeerId& proposer, uint64_t epoch2,
                             const PeerId& proposer2) const {
  if (epoch != epoch2) return epoch > epoch2;
  if (proposer2.empty()) return true;
  return RankLess(proposer, proposer2);
}

uint64_t Membership::envelope_epoch() const {
  if (phase_ == Phase::kMember || phase_ == Phase::kChanging) {
    return std::max(view_.epoch, promised_epoch_);
  }
  return max_epoch_seen_;
}

bool Membership::CanTrain() const { return phase_ == Phase::kMember && pause_reason_.empty(); }

void Membership::Send(const PeerId& to, Message m) {
  if (to == cfg_.self) return;
  outgoing_.push_back({to, Envelope{envelope_epoch(), cfg_.self, std::move(m)}});
}

void Membership::Decide(Decision d) { decisions_.push_back(std::move(d)); }

void Membership::Warn(const std::string& key, const std::string& reason) {
  if (!warned_.insert(key).second) return;
  Decide({Decision::kWarning, "", reason, {}, {}, false});
}

std::vector<Outgoing> Membership::TakeOutgoing() { return std::exchange(outgoing_, {}); }
std::vector<Decision> Membership::TakeDecisions() { return std::exchange(decisions_, {}); }

// ---- events ----------------------------------------------------------------------

void Membership::OnTick(int64_t now_ms) { Evaluate(now_ms); }

void Membership::OnLinkBroken(const PeerId& peer, int64_t now_ms) {
  if (peer == cfg_.self) return;
  peers_[peer].link_broken = true;
  Evaluate(now_ms);
}

void Membership::OnStepCompleted(StateVersion state, int64_t now_ms) {
  state_ = state;
  at_step_boundary_ = true;
  Evaluate(now_ms);
  at_step_boundary_ = false;
}

void Membership::OnStateTransferFailed(StateVersion state, int64_t now_ms) {
  state_ = state;
  if (phase_ == Phase::kMember) disrupted_ = true;
  Evaluate(now_ms);
}

void Membership::OnHostsFileChanged(std::vector<PeerId> hosts, int64_t now_ms) {
  cfg_.hosts = std::move(hosts);
  hosts_fp_ = HostsFingerprint(cfg_.hosts);
  Evaluate(now_ms);
}

void Membership::AnnounceLeave(const std::string& reason, int64_t now_ms) {
  (void)now_ms;
  if (phase_ == Phase::kLeft) return;
  for (const PeerId& m : view_.members) Send(m, Leave{reason});
  phase_ = Phase::kLeft;
  have_proposal_ = false;
}

void Membership::OnEnvelope(const Envelope& e, int64_t now_ms) {
  if (e.from == cfg_.self || phase_ == Phase::kLeft) return;
  if (!gate_.Admit(e).ok()) return;  // stale sender: it learns the epoch from our heartbeats
  PeerInfo& info = peers_[e.from];
  info.last_heard_ms = now_ms;
  info.link_broken = false;
  max_epoch_seen_ = std::max(max_epoch_seen_, e.epoch);
  std::visit(
      [&](const auto& m) {
        using T = std::decay_t<decltype(m)>;
        if constexpr (std::is_same_v<T, Heartbeat>) HandleHeartbeat(e.from, m, now_ms);
        if constexpr (std::is_same_v<T, JoinRequest>) HandleJoinRequest(e.from, m, now_ms);
        if constexpr (std::is_same_v<T, ViewProposal>) HandleProposal(e.from, m, now_ms);
        if constexpr (std::is_same_v<T, ViewAck>) HandleAck(e.from, m, now_ms);
        if constexpr (std::is_same_v<T, ViewNack>) HandleNack(e.from, m, now_ms);
        if constexpr (std::is_same_v<T, ViewCommit>) HandleCommit(e.from, m, now_ms);
        if constexpr (std::is_same_v<T, Leave>) HandleLeave(e.from, m, now_ms);
      },
      e.message);
  Evaluate(now_ms);
}

// ---- message handlers ------------------------------------------------------------

void Membership::HandleHeartbeat(const PeerId& from, const Heartbeat& m, int64_t now_ms) {
  PeerInfo& info = peers_[from];
  info.have_heartbeat = true;
  info.last_heartbeat = m;
  if (m.hosts_fingerprint != hosts_fp_) {
    Warn(absl::StrCat("hosts ", from, " ", m.hosts_fingerprint, " ", hosts_fp_),
         absl::StrFormat("the hosts file of %s differs from ours (fingerprint %08x, ours %08x): "
                         "copy the edited file to every host; training continues on the last "
                         "agreed view",
                         from, m.hosts_fingerprint, hosts_fp_));
  }
  if (m.view.empty() || !m.view.Contains(from)) return;
  // Two proposers of the same epoch can both commit when members switched their
  // promise between them; only one of the views can form a ring. The one whose
  // leader ranks lower wins (then the smaller member list); the other's holders
  // rejoin. A view held only by its proposer is thereby dissolved too.
  if (m.view.epoch == view_.epoch && m.view != view_ && phase_ == Phase::kMember) {
    const bool theirs_wins = Rank(m.view.leader()) != Rank(view_.leader())
                                 ? Rank(m.view.leader()) < Rank(view_.leader())
                                 : m.view.members < view_.members;
    if (theirs_wins) {
      BecomeOutOfDate(absl::StrFormat("%s holds the conflicting %s", from, m.view.ToString()),
                      now_ms);
      known_view_ = m.view;
    }
    return;
  }
  // A newer view installed elsewhere, held by its member `from`.
  if (m.view.epoch <= view_.epoch) return;
  if (m.view.epoch >= known_view_.epoch) known_view_ = m.view;
  if (phase_ == Phase::kChanging) {
    if (m.view.epoch < promised_epoch_) return;  // our pending change supersedes it
    if (m.view.epoch == promised_epoch_ && promised_to_ != cfg_.self &&
        m.view.Contains(cfg_.self) && now_ms - promised_ms_ <= cfg_.proposal_timeout_ms) {
      return;  // the commit we are waiting for is on its way
    }
  }
  BecomeOutOfDate(absl::StrFormat("%s installed %s%s", from, m.view.ToString(),
                                  m.view.Contains(cfg_.self) ? " (this peer missed its commit)"
                                                             : " without this peer"),
                  now_ms);
}

void Membership::HandleJoinRequest(const PeerId& from, const JoinRequest& m, int64_t now_ms) {
  (void)now_ms;
  if (RankOf(agreed_hosts_, from) < 0) {
    Warn(absl::StrCat("join ", from),
         absl::StrFormat("join request from %s, which is not in the agreed hosts file: ignored",
                         from));
    return;
  }
  if (m.hosts_fingerprint != hosts_fp_) {
    Warn(absl::StrCat("joinfp ", from, " ", m.hosts_fingerprint),
         absl::StrFormat("joining peer %s has a different hosts file (fingerprint %08x, ours "
                         "%08x)",
                         from, m.hosts_fingerprint, hosts_fp_));
  }
  left_.erase(from);
  if (view_.Contains(from)) disrupted_ = true;  // a member restarted or fell out of date
  pending_joiners_.insert(from);
}

void Membership::HandleProposal(const PeerId& from, const ViewProposal& m, int64_t now_ms) {
  const uint64_t epoch = m.view.epoch;
  if (!m.view.Contains(cfg_.self) || !m.view.Contains(from)) return;  // malformed for us
  if (epoch <= view_.epoch) {
    Send(from, ViewNack{epoch, view_.epoch, ""});
    return;
  }
  const bool same_ballot = epoch == promised_epoch_ && from == promised_to_;
  if (!same_ballot && !BallotBeats(epoch, from, promised_epoch_, promised_to_)) {
    Send(from, ViewNack{epoch, promised_epoch_, promised_to_});
    return;
  }
  if (have_proposal_) have_proposal_ = false;  // ours lost to a better ballot
  const bool was_training = CanTrain();
  promised_epoch_ = epoch;
  promised_to_ = from;
  promised_ms_ = now_ms;
  phase_ = Phase::kChanging;
  if (was_training) {
    Decide({Decision::kStopTraining,
            from,
            absl::StrFormat("%s proposes view epoch %d", from, epoch),
            {},
            {},
            false});
  }
  Send(from, ViewAck{epoch, state_});
}

void Membership::HandleAck(const PeerId& from, const ViewAck& m, int64_t now_ms) {
  if (!have_proposal_ || m.epoch != proposal_.view.epoch || !proposal_.view.Contains(from)) return;
  proposal_.acks[from] = m.state;
  if (proposal_.acks.size() == proposal_.view.members.size()) Commit(now_ms);
}

void Membership::HandleNack(const PeerId& from, const ViewNack& m, int64_t now_ms) {
  (void)from;
  max_epoch_seen_ = std::max(max_epoch_seen_, m.promised_epoch);
  if (!have_proposal_ || m.epoch != proposal_.view.epoch) return;
  have_proposal_ = false;
  next_proposal_ms_ = now_ms + cfg_.proposal_timeout_ms;  // let the better ballot finish
  RevertPhase();
}

void Membership::HandleCommit(const PeerId& from, const ViewCommit& m, int64_t now_ms) {
  if (phase_ != Phase::kChanging || m.view.epoch != promised_epoch_ || from != promised_to_ ||
      !m.view.Contains(cfg_.self)) {
    return;  // not the proposal we acknowledged: that view cannot form a ring with us
  }
  Install(m.view, m.agreement, now_ms);
}

void Membership::HandleLeave(const PeerId& from, const Leave& m, int64_t now_ms) {
  (void)now_ms;
  left_.insert(from);
  pending_joiners_.erase(from);
  if (view_.Contains(from)) {
    Decide({Decision::kSuspect, from, absl::StrCat("left: ", m.reason), {}, {}, false});
  }
}

// ---- view change -------------------------------------------------------------------

void Membership::Propose(std::vector<PeerId> members, int64_t now_ms) {
  const uint64_t epoch = std::max({max_epoch_seen_, promised_epoch_, view_.epoch}) + 1;
  max_epoch_seen_ = epoch;
  const bool was_training = CanTrain();
  have_proposal_ = true;
  proposal_ = Proposal{View{epoch, SortedByRank(std::move(members))}, now_ms, {}};
  proposal_.acks[cfg_.self] = state_;
  promised_epoch_ = epoch;
  promised_to_ = cfg_.self;
  promised_ms_ = now_ms;
  phase_ = Phase::kChanging;
  if (was_training) {
    Decide({Decision::kStopTraining,
            cfg_.self,
            absl::StrFormat("proposing %s", proposal_.view.ToString()),
            {},
            {},
            false});
  }
  for (const PeerId& m : proposal_.view.members) Send(m, ViewProposal{proposal_.view});
  if (proposal_.acks.size() == proposal_.view.members.size()) Commit(now_ms);
}

void Membership::Commit(int64_t now_ms) {
  have_proposal_ = false;
  auto agreement = AgreeOnResume(proposal_.view.members, proposal_.acks);
  if (!agreement.ok()) {
    Warn(absl::StrCat("agree ", proposal_.view.epoch),
         absl::StrCat("cannot form ", proposal_.view.ToString(), ": ",
                      agreement.status().message()));
    next_proposal_ms_ = now_ms + cfg_.proposal_timeout_ms;
    RevertPhase();
    return;
  }
  for (const PeerId& m : proposal_.view.members) Send(m, ViewCommit{proposal_.view, *agreement});
  Install(proposal_.view, *agreement, now_ms);
}

void Membership::CheckProposalTimeout(int64_t now_ms) {
  if (!have_proposal_ || now_ms - proposal_.started_ms <= cfg_.proposal_timeout_ms) return;
  for (const PeerId& m : proposal_.view.members) {
    if (proposal_.acks.count(m)) continue;
    peers_[m].unresponsive_until_ms = now_ms + cfg_.peer_timeout_ms;
    Decide({Decision::kSuspect,
            m,
            absl::StrFormat("did not answer the proposal of view epoch %d within %d ms",
                            proposal_.view.epoch, cfg_.proposal_timeout_ms),
            {},
            {},
            false});
  }
  have_proposal_ = false;
  RevertPhase();
}

void Membership::RevertPhase() {
  if (view_.Contains(cfg_.self)) {
    phase_ = Phase::kMember;
    disrupted_ = true;  // training was stopped for a change that did not happen
  } else if (!known_view_.empty()) {
    phase_ = Phase::kJoining;
  } else {
    phase_ = Phase::kForming;
  }
}

void Membership::Install(const View& view, const StepAgreement& agreement, int64_t now_ms) {
  view_ = view;
  gate_.Advance(view.epoch);
  max_epoch_seen_ = std::max(max_epoch_seen_, view.epoch);
  promised_epoch_ = std::max(promised_epoch_, view.epoch);
  if (known_view_.epoch <= view.epoch) known_view_ = View{};
  phase_ = Phase::kMember;
  disrupted_ = false;
  suspected_.clear();
  install_ms_ = now_ms;
  for (const PeerId& m : view.members) pending_joiners_.erase(m);
  const bool need_state = std::find(agreement.need_state.begin(), agreement.need_state.end(),
                                    cfg_.self) != agreement.need_state.end();
  state_ = agreement.resume;  // after the transfer (if any) this peer holds it
  Decide({Decision::kInstallView, view.leader(),
          absl::StrFormat("installed %s, resuming from %s%s", view.ToString(),
                          agreement.resume.ToString(),
                          need_state ? absl::StrCat(" (state from ", agreement.source, ")") : ""),
          view, agreement, need_state});
}

void Membership::BecomeOutOfDate(const std::string& reason, int64_t now_ms) {
  (void)now_ms;
  const bool was_member = view_.Contains(cfg_.self);
  have_proposal_ = false;
  view_ = View{};
  disrupted_ = false;
  suspected_.clear();
  if (RankOf(cfg_.hosts, cfg_.self) < 0) {
    phase_ = Phase::kLeft;
    Decide({Decision::kLeave,
            "",
            absl::StrCat("removed from the hosts file; ", reason),
            {},
            {},
            false});
    return;
  }
  phase_ = Phase::kJoining;
  if (was_member) {
    Decide({Decision::kExcluded,
            "",
            absl::StrCat(reason, ": this peer's state is stale; rejoining"),
            {},
            {},
            false});
  }
}

void Membership::MaybePropose(int64_t now_ms) {
  if (have_proposal_ || now_ms < next_proposal_ms_) return;
  const bool boundary = at_step_boundary_ || !CanTrain();
  if (phase_ == Phase::kMember) {
    // Members that are alive and really in this view. A straggler (alive, but still
    // reporting another view well after the install) cannot lead or train in it: it
    // is left out and readmitted as a joiner.
    std::vector<PeerId> alive;
    bool change = disrupted_;
    for (const PeerId& m : AliveMembers(now_ms)) {
      const PeerInfo& info = peers_[m];
      if (m != cfg_.self && info.have_heartbeat && info.last_heartbeat.view != view_ &&
          now_ms - install_ms_ > cfg_.proposal_timeout_ms) {
        change = true;
        continue;
      }
      alive.push_back(m);
    }
    if (alive.empty() || alive.front() != cfg_.self) return;  // not the acting leader
    change = change || alive.size() != view_.members.size();
    // Suspicions reported by members: drop the higher-ranked peer of each pair.
    std::set<PeerId> dropped;
    for (const PeerId& q : alive) {
      if (q == cfg_.self) continue;
      const PeerInfo& info = peers_[q];
      if (!info.have_heartbeat) continue;
      const Heartbeat& hb = info.last_heartbeat;
      if (hb.view != view_) continue;  // not yet reported on this view
      if (hb.disrupted) change = true;
      for (const PeerId& s : hb.suspects) {
        if (s == q || std::find(alive.begin(), alive.end(), s) == alive.end()) continue;
        dropped.insert(RankLess(q, s) ? s : q);
        change = true;
      }
    }
    std::vector<PeerId> members;
    for (const PeerId& m : alive) {
      if (dropped.count(m)) continue;
      // Entries removed from the agreed hosts file leave at a step boundary.
      if (m != cfg_.self && RankOf(agreed_hosts_, m) < 0) {
        if (boundary) {
          change = true;
          continue;
        }
      }
      members.push_back(m);
    }
    if (boundary) {
      for (const PeerId& j : pending_joiners_) {
        if (IsAlive(j, now_ms) && RankOf(agreed_hosts_, j) >= 0 &&
            std::find(members.begin(), members.end(), j) == members.end()) {
          members.push_back(j);
          change = true;
        }
      }
    }
    if (!change) return;
    if (!HasQuorum(members, agreed_hosts_, cfg_.min_peers, nullptr)) return;
    Propose(std::move(members), now_ms);
    return;
  }
  if (phase_ == Phase::kForming) {
    std::vector<PeerId> alive;
    for (const PeerId& h : agreed_hosts_) {
      if (IsAlive(h, now_ms)) alive.push_back(h);
    }
    alive = SortedByRank(std::move(alive));
    if (alive.empty() || alive.front() != cfg_.self) return;
    const bool everyone = alive.size() == agreed_hosts_.size();
    if (!everyone && now_ms - start_ms_ < cfg_.startup_grace_ms) return;
    if (!HasQuorum(alive, agreed_hosts_, cfg_.min_peers, nullptr)) return;
    Propose(std::move(alive), now_ms);
  }
}

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
      if (!HasQuorum(alive, agreed_hosts_, cfg_.min_peers, &reason)) break;
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
      if (!HasQuorum(AliveMembers(now_ms), agreed_hosts_, cfg_.min_peers, &reason)) break;
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
  for (const PeerId& m : view_.members) Send(m, Leave{"removed from the hosts file"});
  phase_ = Phase::kLeft;
  Decide({Decision::kLeave,
          "",
          "removed from the hosts file: leaving at a step boundary",
          {},
          {},
          false});
}

void Membership::Evaluate(int64_t now_ms) {
  if (phase_ == Phase::kLeft) return;
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
