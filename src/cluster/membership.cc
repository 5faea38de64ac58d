// Membership state machine (protocol in membership.h): events, message handlers and
// view changes. The periodic evaluation (suspicions, pauses, heartbeats, settings,
// ending) is in membership_evaluate.cc.
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
    case Decision::kPeerLeft:
      return "peer-left";
    case Decision::kConfigMismatch:
      return "config-mismatch";
  }
  return "?";
}

bool EndsView(Decision::Kind kind) {
  switch (kind) {
    case Decision::kStopTraining:
    case Decision::kPause:
    case Decision::kInstallView:
    case Decision::kExcluded:
    case Decision::kLeave:
      return true;
    default:
      return false;
  }
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
  const int64_t timeout_ms = p.timeout_ms >= 0 ? p.timeout_ms : cfg_.peer_timeout_ms;
  return p.last_heard_ms >= 0 && now_ms - p.last_heard_ms <= timeout_ms && !p.link_broken &&
         now_ms >= p.unresponsive_until_ms;
}

void Membership::SetPeerTimeout(const PeerId& peer, int64_t timeout_ms) {
  auto it = peers_.find(peer);  // known peers only: an entry means "heard of"
  if (it != peers_.end()) it->second.timeout_ms = timeout_ms;
}

int64_t Membership::PeerTimeoutMs(const PeerId& peer) const {
  auto it = peers_.find(peer);
  return it != peers_.end() && it->second.timeout_ms >= 0 ? it->second.timeout_ms
                                                          : cfg_.peer_timeout_ms;
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

void Membership::AnnounceLeave(const std::string& reason, int64_t now_ms, int64_t last_step) {
  (void)now_ms;
  if (phase_ == Phase::kLeft) return;
  for (const PeerId& m : view_.members) Send(m, Leave{reason, last_step});
  phase_ = Phase::kLeft;
  have_proposal_ = false;
}

void Membership::OnConfigRefused(const PeerId& peer, uint64_t config, const std::string& difference,
                                 int64_t now_ms) {
  if (peer == cfg_.self || (RankOf(cfg_.hosts, peer) < 0 && RankOf(agreed_hosts_, peer) < 0)) {
    return;
  }
  refused_[peer] = Refusal{config, difference, now_ms};
  Evaluate(now_ms);
}

void Membership::OnEnvelope(const Envelope& e, int64_t now_ms) {
  if (e.from == cfg_.self) return;
  if (phase_ == Phase::kLeft) {
    // Done here, but still say who else leaves (the other members finishing too).
    const Leave* leave = std::get_if<Leave>(&e.message);
    if (leave && gate_.Admit(e).ok() && view_.Contains(e.from) && left_.insert(e.from).second) {
      Decide({Decision::kPeerLeft, e.from, leave->reason, {}, {}, false});
    }
    return;
  }
  if (!gate_.Admit(e).ok()) return;  // stale sender: it learns the epoch from our heartbeats
  refused_.erase(e.from);            // it runs our settings now (restarted)
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
  if (!view_.Contains(from)) return;
  // Every member completes the step the leaver completed: the job ends there for all.
  if (m.last_step >= 0) job_end_step_ = std::max(job_end_step_, m.last_step);
  Decide({Decision::kPeerLeft, from, m.reason, {}, {}, false});
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
  // state_ stays what the trainer last reported. A member sent the state holds it only
  // once the transfer lands (SetState); a transfer given up because a newer view came
  // leaves it with what it held, and its ack of that view must say so, so that the view
  // sends it the state again. Assuming the agreed version here made such a view skip
  // it: it found itself without state, disrupted the view, and two peers doing so in
  // turn superseded each other's transfers forever on links where a transfer takes
  // longer than a view change.
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

}  // namespace rt::cluster
