// Membership: the per-peer state machine that detects failures, forms views, elects
// The leader, admits joiners and pauses without quorum.
//
// Pure logic: no sockets, no threads, no clock. The caller feeds it events with the
// current time (`now_ms`, any monotonic milliseconds) and drains two queues:
// messages to send (Outgoing) and decisions for the trainer (Decision). Tests drive
// many instances over a simulated network with simulated time.
//
// PROTOCOL (every peer runs the same code; there is no master)
// - Heartbeats: every heartbeat_interval_ms each peer sends a Heartbeat (its view,
//   state, hosts fingerprint, whether it trains, whether its ring is disrupted and
//   which members it cannot reach) to every other host of the file and every member.
// - Liveness: a peer is alive if a message from it was admitted within
//   peer_timeout_ms and its link has not broken since. Self is always alive.
// - Epoch gate: envelopes older than the installed view's epoch are refused; every
//   peer stamps its envelopes with max(installed epoch, promised epoch).
// - View change (two phases): the *acting leader* — the lowest-ranked member of the
//   installed view that is alive — proposes a view (epoch = largest epoch seen + 1)
//   when a member is unreachable, a member reports a disrupted ring, a joiner waits
//   (only at a step boundary while training), or the agreed hosts file dropped a
//   member. Without a view yet (cluster start) the lowest-ranked alive host
//   proposes, once every host is alive or startup_grace_ms has passed.
//   A proposal is only made if its members form a quorum; otherwise the peer
//   pauses with the reason.
//   Members accept a proposal whose ballot (epoch, proposer rank — lower rank wins a
//   tie) beats their promise and whose epoch exceeds their installed view: they stop
//   training (Decision kStopTraining) and answer ViewAck with their StateVersion;
//   else ViewNack. When every proposed member acked, the proposer computes the
//   StepAgreement and sends ViewCommit; members install the view if it matches their
//   promise (Decision kInstallView). A proposal unanswered after proposal_timeout_ms
//   marks the silent members unreachable and is retried without them.
// - State reports: a peer's StateVersion (in acks) is only ever what its trainer
//   reported (initial state, OnStepCompleted, SetState, OnStateTransferFailed), never
//   the version a view agreed on: a member in need_state keeps reporting its old
//   version until its transfer lands, so a view that supersedes the transfer sends it
//   the state again instead of finding it without state.
// - Exclusion: a member that learns (from a heartbeat) of a newer installed view it
//   did not install is out of date: kExcluded (discard state), then it is a joiner.
//   Two views of the same epoch (two proposers committed after members switched
//   their promise) are resolved the same way: the view with the lower-ranked leader
//   wins. A member that is alive but keeps reporting another view (a straggler) is
//   left out of the next view and readmitted as a joiner; a joiner whose target view
//   is held by nobody alive goes back to forming.
// - Joining: a peer outside the view sends JoinRequest to the view's leader every
//   heartbeat interval; the leader admits it with the next view change (the joiner
//   is in need_state of the commit and receives the state before training).
// - Hosts file edits: a file is "agreed" once every alive view member reports the
//   same hosts fingerprint; only the agreed file admits new entries and removes
//   dropped ones (at a step boundary), and quorum is counted against it. Differing
//   fingerprints raise a kWarning and training continues on the current view. A peer
//   whose own entry was removed leaves (kLeave) once a view without it is installed.
// - Other settings: a host whose handshake is refused because its cluster
//   fingerprint differs is reported with OnConfigRefused (config = a hash of its
//   fingerprint, difference = what differs). While forming, once every host of the
//   file has answered (alive, or refused) or startup_grace_ms has passed, the peers
//   that answered are grouped by settings (this peer's group: itself and the alive
//   hosts); the largest group stays, on a tie the one holding the lowest-ranked peer.
//   A peer outside it decides kConfigMismatch (exit, naming the difference); the
//   others warn once per refused peer and name it in their pause reason. Members of
//   an installed view never leave for this. A refusal not repeated within
//   refusal_ttl_ms is forgotten (the peer exited), an admitted message clears it.
// - Ending: a member that ends the job (training finished, or an agreed
//   stop after step S) announces Leave with last_step = S. Receivers decide
//   kPeerLeft and, knowing that every member stops after S, no longer suspect,
//   pause or propose: they finish step S and leave too. A member that leaves alone
//   (last_step -1) is re-formed around, as after a failure, but logged as a leave.
// - Split-brain safety: views need a quorum of the agreed file, and a member acts in
//   only one installed view at a time; rings are formed only between peers that
//   installed the same view (compare View::Fingerprint in the ring handshake).
#pragma once

#include <algorithm>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "cluster/messages.h"
#include "cluster/step_agreement.h"
#include "cluster/view.h"

namespace rt::cluster {

struct MembershipConfig {
  PeerId self;
  std::vector<PeerId> hosts;  // the hosts file, rank order; must contain self at start
  int min_peers = 0;          // 0: quorum is a majority of the hosts file
  int64_t peer_timeout_ms = 10000;
  int64_t heartbeat_interval_ms = 1000;
  int64_t proposal_timeout_ms = 3000;  // acks of a proposal must arrive within this
  int64_t startup_grace_ms = 5000;     // at start, wait this long for all hosts
  uint64_t initial_epoch = 0;          // e.g. the epoch of the checkpoint resumed from
  StateVersion initial_state;          // what this peer holds at start
  int64_t refusal_ttl_ms = 15000;      // a refusal for other settings counts this long
};

// How long a peer may stay silent before it is suspected, adapted to its link: the
// heartbeat interval plus 7 kernel retransmission timeouts (a heartbeat segment lost
// three times in a row is resent after 1 + 2 + 4 RTOs: exponential backoff), within
// [floor_ms (--peer-timeout), max(cap_ms, floor_ms)]. rto_ms < 0 (unknown) gives floor_ms.
// At 100 ms RTT the kernel's RTO is ~300 ms: 300 + 7 * 300 = 2.4 s, so the 3 s floor
// holds; at 300 ms RTT with jitter (RTO ~600 ms) 4.5 s; a dead peer is suspected within
// the cap (10 s by default) on any link.
inline int64_t AdaptivePeerTimeoutMs(int64_t rto_ms, int64_t heartbeat_interval_ms,
                                     int64_t floor_ms, int64_t cap_ms = 10000) {
  if (rto_ms < 0) return floor_ms;
  const int64_t want = heartbeat_interval_ms + 7 * rto_ms;
  return std::min(std::max(want, floor_ms), std::max(cap_ms, floor_ms));
}

struct Outgoing {
  PeerId to;
  Envelope envelope;
};

struct Decision {
  enum Kind {
    kSuspect,         // peer: a view member became unreachable (reason says why)
    kStopTraining,    // stop at once (abort the step in flight): a view change is under way
    kPause,           // cannot train (reason), e.g. no quorum; keep heartbeating
    kInstallView,     // view + agreement: re-form the ring; fetch state if need_state
    kExcluded,        // this peer is out of date: discard training state, rejoin
    kLeave,           // removed from the hosts file and from the view: exit cleanly
    kWarning,         // something the user should see (e.g. hosts files differ)
    kPeerLeft,        // peer: a member left cleanly (reason: finished, stopped, removed)
    kConfigMismatch,  // this peer's settings differ from the ones that stay: exit (reason)
  };
  Kind kind;
  PeerId peer;
  std::string reason;
  View view;                // kInstallView
  StepAgreement agreement;  // kInstallView
  bool need_state = false;  // kInstallView: fetch agreement.resume from agreement.source
};
const char* DecisionKindName(Decision::Kind kind);
// Whether a decision ends the installed view's business: a stop for a view change, a
// pause, a (newer) view, an exclusion, a leave. A step in flight is aborted on one, and
// a state transfer waiting for its other side gives up when one is queued.
bool EndsView(Decision::Kind kind);

class Membership {
 public:
  enum class Phase {
    kForming,   // no view known anywhere yet
    kJoining,   // a view exists elsewhere; this peer asks to be admitted
    kMember,    // installed view, training or paused (see CanTrain)
    kChanging,  // promised a proposal, waiting for its commit
    kLeft,      // removed from the hosts file; done
  };

  Membership(MembershipConfig config, int64_t now_ms);
  Membership(const Membership&) = delete;
  Membership& operator=(const Membership&) = delete;

  // Events. Each may queue Outgoing messages and Decisions.
  void OnTick(int64_t now_ms);
  // An envelope received from the network (already decoded). Older epochs are refused.
  void OnEnvelope(const Envelope& envelope, int64_t now_ms);
  // The transport lost its connection to `peer`: suspect it at once.
  void OnLinkBroken(const PeerId& peer, int64_t now_ms);
  // The trainer completed a step (a step boundary): admissions happen here.
  void OnStepCompleted(StateVersion state, int64_t now_ms);
  // The trainer loaded/received state outside a step (e.g. after a state transfer).
  void SetState(StateVersion state) { state_ = state; }
  // The state transfer ordered by kInstallView failed (the source died or no longer
  // holds the agreed version): this peer now holds `state` (often step -1) and its
  // ring cannot form, so the view is disrupted and a new one will be proposed.
  void OnStateTransferFailed(StateVersion state, int64_t now_ms);
  // The hosts file was re-read (SIGHUP or change noticed).
  void OnHostsFileChanged(std::vector<PeerId> hosts, int64_t now_ms);
  // This peer stops at a step boundary: tells the members, then kLeft. last_step >= 0:
  // the whole job ends after that step (training finished, or an agreed stop).
  void AnnounceLeave(const std::string& reason, int64_t now_ms, int64_t last_step = -1);
  // The handshake with `peer` (a host of the file) was refused because its settings
  // differ: `config` identifies its settings, `difference` says what differs.
  void OnConfigRefused(const PeerId& peer, uint64_t config, const std::string& difference,
                       int64_t now_ms);

  std::vector<Outgoing> TakeOutgoing();
  std::vector<Decision> TakeDecisions();

  Phase phase() const { return phase_; }
  const View& view() const { return view_; }  // installed view (may be empty)
  bool CanTrain() const;                      // installed, intact, quorum, not changing
  const std::string& pause_reason() const { return pause_reason_; }
  uint64_t envelope_epoch() const;  // max(installed, promised)
  bool IsAlive(const PeerId& peer, int64_t now_ms) const;
  // This peer's silence limit from now on (AdaptivePeerTimeoutMs); until set, and for
  // unknown peers, cfg.peer_timeout_ms.
  void SetPeerTimeout(const PeerId& peer, int64_t timeout_ms);
  int64_t PeerTimeoutMs(const PeerId& peer) const;
  // IsAlive, or a member of the installed view not heard from yet within
  // peer_timeout_ms of the install (a new member's links are still connecting).
  bool IsAliveMember(const PeerId& member, int64_t now_ms) const;
  const std::vector<PeerId>& agreed_hosts() const { return agreed_hosts_; }

 private:
  struct PeerInfo {
    int64_t last_heard_ms = -1;  // -1: never
    bool link_broken = false;    // since the last admitted message
    int64_t unresponsive_until_ms = -1;
    int64_t timeout_ms = -1;  // -1: cfg_.peer_timeout_ms
    bool have_heartbeat = false;
    Heartbeat last_heartbeat;
  };
  struct Refusal {
    uint64_t config = 0;
    std::string difference;
    int64_t last_ms = 0;
  };
  struct Proposal {
    View view;
    int64_t started_ms = 0;
    std::map<PeerId, StateVersion> acks;
  };

  void Evaluate(int64_t now_ms);
  void MaybePropose(int64_t now_ms);
  void Propose(std::vector<PeerId> members, int64_t now_ms);
  void Commit(int64_t now_ms);
  void RevertPhase();
  void LeaveIfRemoved(int64_t now_ms);
  void CheckProposalTimeout(int64_t now_ms);
  void UpdateSuspicions(int64_t now_ms);
  void UpdateAgreedHosts();
  void UpdatePause(int64_t now_ms);
  void SendHeartbeats(int64_t now_ms);
  void SendJoinRequest(int64_t now_ms);
  void CheckSettings(int64_t now_ms);
  std::string RefusedSummary() const;  // "refused for other settings: a (diff); b (diff)"

  void HandleHeartbeat(const PeerId& from, const Heartbeat& m, int64_t now_ms);
  void HandleJoinRequest(const PeerId& from, const JoinRequest& m, int64_t now_ms);
  void HandleProposal(const PeerId& from, const ViewProposal& m, int64_t now_ms);
  void HandleAck(const PeerId& from, const ViewAck& m, int64_t now_ms);
  void HandleNack(const PeerId& from, const ViewNack& m, int64_t now_ms);
  void HandleCommit(const PeerId& from, const ViewCommit& m, int64_t now_ms);
  void HandleLeave(const PeerId& from, const Leave& m, int64_t now_ms);

  void Install(const View& view, const StepAgreement& agreement, int64_t now_ms);
  void BecomeOutOfDate(const std::string& reason, int64_t now_ms);
  void Send(const PeerId& to, Message m);
  void Decide(Decision d);
  void Warn(const std::string& key, const std::string& reason);

  int Rank(const PeerId& p) const;  // in the current hosts file; large if absent
  bool RankLess(const PeerId& a, const PeerId& b) const;
  std::vector<PeerId> SortedByRank(std::vector<PeerId> peers) const;
  std::vector<PeerId> AliveMembers(int64_t now_ms) const;
  bool BallotBeats(uint64_t epoch, const PeerId& proposer, uint64_t epoch2,
                   const PeerId& proposer2) const;

  MembershipConfig cfg_;
  std::vector<PeerId> agreed_hosts_;
  uint32_t hosts_fp_ = 0;
  int64_t start_ms_ = 0;
  Phase phase_ = Phase::kForming;
  View view_;  // installed
  int64_t install_ms_ = 0;
  View known_view_;  // newest view installed elsewhere (target of a joiner)
  StateVersion state_;
  EpochGate gate_;
  uint64_t max_epoch_seen_ = 0;
  uint64_t promised_epoch_ = 0;
  PeerId promised_to_;
  int64_t promised_ms_ = 0;
  bool have_proposal_ = false;
  Proposal proposal_;
  int64_t next_proposal_ms_ = 0;  // backoff after a refused proposal
  bool disrupted_ = false;        // a member of the installed view was lost since install
  bool at_step_boundary_ = true;  // admissions allowed now
  std::set<PeerId> pending_joiners_;
  std::set<PeerId> left_;              // members that announced Leave
  int64_t job_end_step_ = -1;          // a member announced that every member stops after it
  std::map<PeerId, Refusal> refused_;  // hosts refused for other settings, by peer
  bool settings_refused_ = false;      // kConfigMismatch decided
  std::map<PeerId, PeerInfo> peers_;
  std::set<PeerId> suspected_;  // view members currently suspected (for decisions)
  int64_t last_heartbeat_ms_ = -1;
  int64_t last_join_request_ms_ = -1;
  std::string pause_reason_;
  int pause_kind_ = -1;
  std::set<std::string> warned_;
  std::vector<Outgoing> outgoing_;
  std::vector<Decision> decisions_;
};

}  // namespace rt::cluster
