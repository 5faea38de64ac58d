// MembershipService: the socket-level runtime of Membership.
//
// One service per peer. It owns a full mesh of small control links on a TcpNode
// (the node the ring uses too, on its own channel, so heartbeats never queue behind
// gradient chunks) and drives one Membership on its own control thread, so compute
// never delays heartbeats. Links are one-way: every peer dials each other peer and
// sends on that link (redialled with backoff whenever it breaks or the peer comes
// back; a dial waiting out its backoff restarts at once when the peer's own link
// arrives, one connecting or handshaking is kept: cancelling it would close a link the
// peer may have just accepted), and accepts each other peer's link and receives on it.
// Every Envelope is the payload of one kControl frame whose frame epoch is the
// envelope epoch; the Membership's EpochGate refuses older epochs (the frame layer
// does not, so a stale peer is answered, not disconnected).
//
// Events reach Membership in arrival order on the control thread: received
// envelopes, broken links (OnLinkBroken: a closed socket is noticed at once, a silent
// peer after peer_timeout_ms), ticks every heartbeat_interval_ms/4, and the trainer's
// calls below. Decisions come back through NextDecision() (a queue, in order) and the
// optional on_decision callback (called on the control thread: keep it short, e.g.
// abort the collective in flight on kStopTraining).
//
// Peers refused for other settings (TcpNode::FingerprintMismatches) are passed to the
// Membership every tick (OnConfigRefused), which may decide kConfigMismatch.
//
// Hosts-file edits: the service keeps the node's host list
// (TcpNode::SetHosts) equal to the agreed hosts file plus the members of the
// installed view plus self. So a new entry is linked (and can join) once every view
// member reports the same edited file, never before: until then the node refuses it.
// A removed entry keeps its links while it is still a view member (it leaves at a
// step boundary) and loses them once a view without it is installed. Control links
// and receivers follow the node's slots (TcpNode ranks are stable slots).
//
// Status reports: SetLocalReport hands the service this peer's opaque
// report (src/observe/peer_report.h, at most kMaxReportBytes); it rides on the next
// heartbeat to each peer after it changed (and at least every kReportRefreshMs), and
// PeerReports() returns the newest report received from every peer with its age and
// whether the membership considers the peer alive. Nothing here decodes reports.
//
// Thread-safety: every public method may be called from any thread.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "cluster/membership.h"
#include "net/tcp_node.h"

namespace rt::cluster {

// The channel of control links ("CTRL" + 1); rings and state transfers use others.
inline constexpr uint64_t kControlChannel = 0x4C525443'00000001ull;

// The channel of the ring of `view`: rings of different views (another epoch, or a
// conflicting view of the same epoch) never exchange a link, so two peers only form
// a ring when they installed the very same view (View::Fingerprint).
inline uint64_t RingChannel(const View& view) {
  return (0x52ull << 56) ^ (static_cast<uint64_t>(view.Fingerprint()) << 20) ^ view.epoch;
}

// A peer of the hosts file or the view as this peer sees it (PeerReports).
struct RemoteReport {
  PeerId peer;
  bool alive = false;           // heard from within the peer timeout, link not broken
  bool in_view = false;         // member of this peer's installed view
  int64_t age_ms = -1;          // since `report` arrived (-1: none yet)
  std::vector<uint8_t> report;  // the newest non-empty report received
};

struct MembershipServiceOptions {
  std::shared_ptr<net::TcpNode> node;  // started; its hosts and self rank name the peers
  uint64_t channel = kControlChannel;
  int min_peers = 0;                    // --min-peers (0: majority of the hosts file)
  int64_t peer_timeout_ms = 3000;       // --peer-timeout: silent this long = suspected
  int64_t heartbeat_interval_ms = 300;  // every peer heartbeats every peer this often
  int64_t proposal_timeout_ms = 1500;   // acks of a view proposal must come within this
  int64_t startup_grace_ms = 10000;     // at start, wait this long for every host
  uint64_t initial_epoch = 0;           // epoch of the checkpoint resumed from
  StateVersion initial_state{0, -1};    // what this peer holds at start (-1: nothing)
  size_t max_queued_per_peer = 64;      // envelopes kept while a link is being dialled
  // Called on the control thread for every decision, before NextDecision sees it.
  std::function<void(const Decision&)> on_decision;
};

class MembershipService {
 public:
  // Starts the control thread and the links. The node must outlive nothing: the
  // service keeps it alive until Stop().
  static absl::StatusOr<std::unique_ptr<MembershipService>> Start(MembershipServiceOptions options);
  ~MembershipService();  // Stop()
  MembershipService(const MembershipService&) = delete;
  MembershipService& operator=(const MembershipService&) = delete;

  // Closes every control link and joins the threads (peers see the links break).
  // Idempotent. Pending NextDecision calls return nullopt.
  void Stop();

  const PeerId& self() const { return self_; }
  // Snapshots, updated after every event the control thread handled.
  View view() const;
  bool CanTrain() const;
  std::string pause_reason() const;
  Membership::Phase phase() const;
  std::vector<PeerId> agreed_hosts() const;

  // The next decision, in order; nullopt after `timeout` or once stopped.
  std::optional<Decision> NextDecision(absl::Duration timeout);
  // True while a decision that ends the installed view's business waits in the queue
  // (a stop for a view change, a pause, a newer view, an exclusion, a leave): a state
  // transfer of the older view polls it, since its other side has moved on or will.
  // Does not consume decisions.
  bool ViewSuperseded() const;
  // Waits until this peer can train in an installed view; returns that view, or
  // nullopt after `timeout`. Does not consume decisions.
  std::optional<View> WaitUntilTraining(absl::Duration timeout);
  // Waits until pred(view(), CanTrain()) holds; false after `timeout`.
  bool WaitFor(const std::function<bool(const View&, bool can_train)>& pred,
               absl::Duration timeout);

  // Trainer events (queued to the control thread; return at once).
  void StepCompleted(StateVersion state);        // after every completed optimizer step
  void SetState(StateVersion state);             // after loading/receiving state
  void StateTransferFailed(StateVersion state);  // the ordered fetch failed
  void HostsChanged(std::vector<PeerId> hosts);  // re-read hosts file, as endpoints
  // Loads and validates the hosts file (SIGHUP path), then HostsChanged. The error
  // (e.g. "hosts:3: bad port") is returned and nothing changes.
  absl::Status HostsFileChanged(const std::string& path);
  // This peer leaves at a step boundary (last_step >= 0: the whole job ends after
  // that step; see Membership::AnnounceLeave). Returns once the Leave is handed to
  // the control links (at most 2 s), so that it goes out before the process exits.
  void Leave(const std::string& reason, int64_t last_step = -1);

  // This peer's status report for the other peers (see the file comment). Longer
  // ones than kMaxReportBytes are not sent (logged once).
  void SetLocalReport(std::vector<uint8_t> report);
  // Every other peer of the node's host list, in slot order.
  std::vector<RemoteReport> PeerReports() const;

  // Test hook: drop every envelope to or from these peers, as a partition would
  // (links stay up, so only peer_timeout_ms notices). Empty set heals.
  void SetBlockedPeers(std::set<PeerId> peers);

 private:
  struct Event {
    enum Kind {
      kEnvelope,
      kLinkBroken,
      kPeerConnected,
      kStep,
      kSetState,
      kTransferFailed,
      kHosts,
      kLeave
    };
    Kind kind;
    Envelope envelope;
    PeerId peer;
    StateVersion state;
    std::vector<PeerId> hosts;
    std::string reason;
  };
  struct OutLink;
  struct ReceivedReport {
    std::vector<uint8_t> bytes;
    int64_t received_ms = -1;
  };
  static constexpr int64_t kReportRefreshMs = 5000;

  explicit MembershipService(MembershipServiceOptions options);
  void Post(Event e);
  void ControlLoop();
  struct InLink;
  void ReceiveLoop(int rank, PeerId peer, InLink* in);
  // Keeps the node's host list = agreed hosts + view members + self, and the
  // control links and receivers = the node's active slots. Control thread only.
  void SyncHosts();
  void Apply(const Event& e, int64_t now_ms);
  void PumpLinks(int64_t now_ms);
  void SendOut(const Outgoing& o, int64_t now_ms);
  // `e`, or a heartbeat with the local report attached when `out` has not had it.
  const Envelope& WithReport(const Envelope& e, OutLink* out, int64_t now_ms);
  void Drain(int64_t now_ms);
  void Publish(const Decision& d);
  void PollRefusals(int64_t now_ms);  // new TcpNode mismatches -> Membership
  bool Blocked(const PeerId& peer) const;
  int RankOfPeer(const PeerId& peer) const;

  MembershipServiceOptions options_;
  std::shared_ptr<net::TcpNode> node_;
  PeerId self_;

  // Control thread only (and Stop() after the control thread ended).
  std::vector<PeerId> node_peers_;  // node slot -> endpoint
  std::unique_ptr<Membership> membership_;
  std::vector<std::unique_ptr<OutLink>> out_;     // by node slot (null: self or inactive)
  std::vector<std::unique_ptr<InLink>> in_;       // by node slot (null: self or inactive)
  std::vector<std::unique_ptr<InLink>> retired_;  // receivers of removed slots, ending
  std::vector<PeerId> node_hosts_;                // what SetHosts was last given
  View last_logged_view_;
  Envelope report_envelope_;                         // WithReport's copy
  std::map<std::string, absl::Time> refusals_seen_;  // endpoint -> last refusal passed on

  std::atomic<bool> stop_{false};
  std::thread control_thread_;

  mutable std::mutex mu_;
  std::condition_variable cv_;        // events for the control thread
  std::condition_variable state_cv_;  // snapshot / decisions for the trainer
  std::deque<Event> events_;
  std::deque<Decision> decisions_;
  std::set<PeerId> blocked_;
  View view_;
  bool can_train_ = false;
  std::string pause_reason_;
  Membership::Phase phase_ = Membership::Phase::kForming;
  std::vector<PeerId> agreed_hosts_;
  bool stopped_ = false;
  std::vector<uint8_t> local_report_;  // SetLocalReport
  uint64_t local_report_version_ = 0;  // bumped by every SetLocalReport
  bool report_too_large_warned_ = false;
  std::map<PeerId, ReceivedReport> received_reports_;
  std::vector<RemoteReport> peer_reports_;  // without bytes; filled by Drain
};

}  // namespace rt::cluster
