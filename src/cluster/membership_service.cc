// MembershipService: control links (dial/accept/redial) and the control thread that
// drives Membership. The thread-safe calls of the trainer and the status pages (the
// snapshot, decisions, events, reports) are in membership_service_api.cc.
#include "cluster/membership_service.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>

#include "absl/strings/match.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "core/clock.h"
#include "core/crc32c.h"
#include "core/log.h"
#include "net/hosts_file.h"

namespace rt::cluster {
namespace {

// How long one ConnectTo keeps retrying (it backs off up to 1 s between attempts);
// then a new one starts. AcceptFrom waits are re-armed just the same.
constexpr absl::Duration kDialSpan = absl::Seconds(30);
constexpr absl::Duration kAcceptSpan = absl::Seconds(60);
// Receivers wake this often to notice a newer link from their peer or Stop().
constexpr absl::Duration kReceivePoll = absl::Milliseconds(50);

}  // namespace

struct MembershipService::OutLink {
  std::unique_ptr<net::Link> link;
  std::shared_ptr<net::PendingLink> dialing;
  int64_t dial_after_ms = 0;
  int64_t up_ms = 0;                 // when the current link was adopted
  bool warned = false;               // a fatal refusal was logged
  uint64_t report_version_sent = 0;  // local_report_version_ last attached
  int64_t report_sent_ms = -1;
  std::deque<std::pair<int64_t, Envelope>> queued;  // (ms, envelope) sent while no link was up
  int64_t timeout_checked_ms = -1;  // when the peer's failure timeout was last adapted
  int64_t timeout_logged_ms = -1;   // the timeout last logged (when above --peer-timeout)
};

struct MembershipService::InLink {
  std::thread thread;
  std::atomic<bool> stop{false};  // the slot was removed
  std::atomic<bool> done{false};  // the thread is about to return
};

MembershipService::MembershipService(MembershipServiceOptions options)
    : options_(std::move(options)), node_(options_.node) {}

absl::StatusOr<std::unique_ptr<MembershipService>> MembershipService::Start(
    MembershipServiceOptions options) {
  if (!options.node) return absl::InvalidArgumentError("MembershipService needs a started node");
  if (options.heartbeat_interval_ms <= 0 || options.peer_timeout_ms <= 0 ||
      options.proposal_timeout_ms <= 0) {
    return absl::InvalidArgumentError("membership timeouts must be positive");
  }
  if (options.peer_timeout_ms < 2 * options.heartbeat_interval_ms) {
    return absl::InvalidArgumentError(
        absl::StrFormat("peer timeout %d ms must be at least two heartbeat intervals (%d ms each)",
                        options.peer_timeout_ms, options.heartbeat_interval_ms));
  }
  std::unique_ptr<MembershipService> s(new MembershipService(std::move(options)));
  const int slots = s->node_->num_hosts();
  for (int r = 0; r < slots; ++r) {
    s->node_peers_.push_back(s->node_->Host(r).Endpoint());
    if (s->node_->IsActive(r)) s->node_hosts_.push_back(s->node_peers_.back());
  }
  s->self_ = s->node_->self_endpoint();

  MembershipConfig c;
  c.self = s->self_;
  c.hosts = s->node_hosts_;
  c.min_peers = s->options_.min_peers;
  c.peer_timeout_ms = s->options_.peer_timeout_ms;
  c.heartbeat_interval_ms = s->options_.heartbeat_interval_ms;
  c.proposal_timeout_ms = s->options_.proposal_timeout_ms;
  c.startup_grace_ms = s->options_.startup_grace_ms;
  c.initial_epoch = s->options_.initial_epoch;
  c.initial_state = s->options_.initial_state;
  s->membership_ = std::make_unique<Membership>(c, NowMs());
  s->out_.resize(slots);
  s->in_.resize(slots);
  {
    std::lock_guard<std::mutex> lock(s->mu_);
    s->agreed_hosts_ = s->membership_->agreed_hosts();
  }
  MembershipService* raw = s.get();
  for (int r = 0; r < slots; ++r) {
    if (r == s->node_->self_rank() || !s->node_->IsActive(r)) continue;
    s->out_[r] = std::make_unique<OutLink>();
    s->in_[r] = std::make_unique<InLink>();
    InLink* in = s->in_[r].get();
    const PeerId peer = s->node_peers_[r];
    in->thread = std::thread([raw, r, peer, in] { raw->ReceiveLoop(r, peer, in); });
  }
  s->control_thread_ = std::thread([raw] { raw->ControlLoop(); });
  return s;
}

MembershipService::~MembershipService() { Stop(); }

void MembershipService::Stop() {
  if (stop_.exchange(true)) {
    if (control_thread_.joinable()) control_thread_.join();
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopped_ = true;
  }
  cv_.notify_all();
  state_cv_.notify_all();
  // The control thread first: it starts receivers for new hosts.
  if (control_thread_.joinable()) control_thread_.join();
  for (auto* list : {&in_, &retired_}) {
    for (auto& in : *list) {
      if (in && in->thread.joinable()) in->thread.join();
    }
    list->clear();
  }
  for (auto& o : out_) {
    if (!o) continue;
    if (o->dialing) o->dialing->Cancel();
    o->link.reset();
  }
  out_.clear();
  node_.reset();
}

// ---------------------------------------------------------------- receiving

// One thread per peer: holds the newest link the peer dialled to us and turns its
// frames into events. A newer link from the same peer (it reconnected) replaces the
// current one; a failing current link is reported once as broken.
void MembershipService::ReceiveLoop(int rank, PeerId peer, InLink* in) {
  const std::string where = "control link from " + peer;
  std::unique_ptr<net::Link> cur;
  auto arm = [&] { return node_->AcceptFrom(rank, options_.channel, absl::Now() + kAcceptSpan); };
  std::shared_ptr<net::PendingLink> next = arm();
  std::vector<uint8_t> bytes;
  while (!stop_.load() && !in->stop.load()) {
    if (next->Wait(cur ? absl::ZeroDuration() : kReceivePoll)) {
      absl::StatusOr<std::unique_ptr<net::Link>> link = next->Take();
      if (link.ok()) {
        cur = *std::move(link);  // the old link (if any) closes
        Post(Event{Event::kPeerConnected, {}, peer, {}, {}, {}});
      } else if (!cur) {
        absl::SleepFor(kReceivePoll);  // e.g. the slot is being removed: no busy loop
      }
      next = arm();
      continue;
    }
    if (!cur) continue;
    absl::Status st = cur->connection().RecvControl(&bytes, kReceivePoll);
    if (absl::IsDeadlineExceeded(st)) continue;
    if (st.ok()) {
      absl::StatusOr<Envelope> env = DecodeEnvelope(bytes, where);
      if (!env.ok()) {
        LogWarning("%s", std::string(env.status().message()));
        st = env.status();
        cur->connection().Fail(st);
      } else if (env->from != peer) {
        st = absl::DataLossError(
            absl::StrFormat("%s carried an envelope from %s", where, env->from));
        LogWarning("%s", std::string(st.message()));
        cur->connection().Fail(st);
      } else {
        if (!Blocked(peer)) Post(Event{Event::kEnvelope, *std::move(env), peer, {}, {}, {}});
        continue;
      }
    }
    LogDebug("%s broke: %s", where, std::string(st.message()));
    cur.reset();
    if (!Blocked(peer)) Post(Event{Event::kLinkBroken, {}, peer, {}, {}, {}});
  }
  next->Cancel();
  in->done.store(true);
}

// ---------------------------------------------------------------- control thread

void MembershipService::ControlLoop() {
  const int64_t tick_ms = std::max<int64_t>(5, options_.heartbeat_interval_ms / 4);
  int64_t next_tick = NowMs();
  std::deque<Event> batch;
  while (!stop_.load()) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      const int64_t wait_ms = std::max<int64_t>(0, next_tick - NowMs());
      cv_.wait_for(lock, std::chrono::milliseconds(wait_ms),
                   [&] { return !events_.empty() || stopped_; });
      batch.swap(events_);
    }
    if (stop_.load()) break;
    int64_t now = NowMs();
    for (const Event& e : batch) Apply(e, now);
    batch.clear();
    PumpLinks(now);
    if (now >= next_tick) {
      PollRefusals(now);
      membership_->OnTick(now);
      next_tick = now + tick_ms;
    }
    Drain(now);
    SyncHosts();
  }
}

void MembershipService::SyncHosts() {
  const Membership& m = *membership_;
  std::vector<PeerId> want = m.agreed_hosts();
  auto add = [&](const PeerId& p) {
    if (std::find(want.begin(), want.end(), p) == want.end()) want.push_back(p);
  };
  for (const PeerId& p : m.view().members) add(p);
  add(self_);
  if (want == node_hosts_) return;
  std::vector<net::HostEntry> entries;
  for (const PeerId& p : want) {
    // Peer ids are numeric endpoints: parsing them resolves nothing.
    absl::StatusOr<std::vector<net::HostEntry>> e = net::ParseHostsText(p, "peer id " + p);
    if (!e.ok()) {
      LogWarning("cannot link to %s: %s", p, std::string(e.status().message()));
      continue;
    }
    entries.push_back(e->front());
  }
  // Receivers of removed peers stop before the node fails their waits.
  for (size_t r = 0; r < node_peers_.size(); ++r) {
    if (!out_[r] || std::find(want.begin(), want.end(), node_peers_[r]) != want.end()) continue;
    LogInfo("dropping the control links of %s: no longer in the agreed hosts file or the view",
            node_peers_[r]);
    if (out_[r]->dialing) out_[r]->dialing->Cancel();
    out_[r].reset();
    in_[r]->stop.store(true);
    retired_.push_back(std::move(in_[r]));
  }
  absl::Status st = node_->SetHosts(entries);
  if (!st.ok()) LogWarning("cannot change the host list: %s", std::string(st.message()));
  node_hosts_ = std::move(want);
  const int slots = node_->num_hosts();
  node_peers_.resize(slots);
  out_.resize(slots);
  in_.resize(slots);
  for (int r = 0; r < slots; ++r) {
    node_peers_[r] = node_->Host(r).Endpoint();
    if (r == node_->self_rank() || out_[r] || !node_->IsActive(r)) continue;
    LogInfo("linking to %s (agreed hosts file)", node_peers_[r]);
    out_[r] = std::make_unique<OutLink>();
    in_[r] = std::make_unique<InLink>();
    InLink* in = in_[r].get();
    const PeerId peer = node_peers_[r];
    in->thread = std::thread([this, r, peer, in] { ReceiveLoop(r, peer, in); });
  }
  // Join receivers that have ended.
  for (auto it = retired_.begin(); it != retired_.end();) {
    if (!(*it)->done.load()) {
      ++it;
      continue;
    }
    (*it)->thread.join();
    it = retired_.erase(it);
  }
}

void MembershipService::Apply(const Event& e, int64_t now_ms) {
  Membership& m = *membership_;
  switch (e.kind) {
    case Event::kEnvelope:
      if (const auto* hb = std::get_if<Heartbeat>(&e.envelope.message); hb && !hb->report.empty()) {
        std::lock_guard<std::mutex> lock(mu_);
        received_reports_[e.envelope.from] = ReceivedReport{hb->report, now_ms};
      }
      m.OnEnvelope(e.envelope, now_ms);
      break;
    case Event::kLinkBroken:
      m.OnLinkBroken(e.peer, now_ms);
      break;
    case Event::kPeerConnected: {
      // The peer (re)started and dialled us: dial it back now rather than when the
      // backoff of the running attempt (up to 1 s) next fires. Only a dial that is
      // backing off: one that is connecting or handshaking may be a link the peer has
      // just accepted. Cancelling it closes that link, the peer reports it broken and
      // redials, and when both peers dial each other at about the same time over slow
      // links (a handshake takes a few round trips) each one's new link cancels the
      // other's dial, round after round: they never keep a link.
      const int rank = RankOfPeer(e.peer);
      OutLink* o = rank >= 0 ? out_[rank].get() : nullptr;
      if (o && !o->link && o->dialing && o->dialing->CancelIfBackingOff()) {
        o->dialing.reset();
        o->dial_after_ms = now_ms;
      }
      break;
    }
    case Event::kStep:
      m.OnStepCompleted(e.state, now_ms);
      break;
    case Event::kSetState:
      m.SetState(e.state);
      break;
    case Event::kTransferFailed:
      m.OnStateTransferFailed(e.state, now_ms);
      break;
    case Event::kHosts:
      m.OnHostsFileChanged(e.hosts, now_ms);
      break;
    case Event::kLeave:
      m.AnnounceLeave(e.reason, now_ms, e.state.step);
      break;
  }
}

// Dials peers without an outgoing link, adopts finished dials, drops broken links.
void MembershipService::PumpLinks(int64_t now_ms) {
  for (size_t r = 0; r < out_.size(); ++r) {
    OutLink* o = out_[r].get();
    if (!o) continue;
    const PeerId& peer = node_peers_[r];
    if (o->link && !o->link->connection().status().ok()) {
      LogDebug("control link to %s broke: %s", peer,
               std::string(o->link->connection().status().message()));
      o->link.reset();
      o->dial_after_ms = now_ms;
      if (!Blocked(peer)) membership_->OnLinkBroken(peer, now_ms);
    }
    // A link up for longer than the peer timeout to a peer we have not heard from
    // for that long: after a network cut the old TCP connection resumes only at its
    // next retransmission (exponential backoff: seconds), a new one within about a
    // second of the cut healing. So reconnect (the peer does the same).
    if (o->link && now_ms - o->up_ms > options_.peer_timeout_ms && !Blocked(peer) &&
        !membership_->IsAlive(peer, now_ms)) {
      LogDebug("control link to %s: nothing heard for over %d ms; reconnecting", peer,
               options_.peer_timeout_ms);
      o->link.reset();
      o->dial_after_ms = now_ms;
    }
    // Once a second: the peer's silence limit follows this link's retransmission timeout
    // (membership.h, AdaptivePeerTimeoutMs): long, jittery round trips need longer.
    if (o->link && now_ms - o->timeout_checked_ms >= 1000) {
      o->timeout_checked_ms = now_ms;
      const int64_t rto_ms = o->link->connection().KernelRtoMs();
      const int64_t timeout_ms =
          AdaptivePeerTimeoutMs(rto_ms, options_.heartbeat_interval_ms, options_.peer_timeout_ms);
      membership_->SetPeerTimeout(peer, timeout_ms);
      if (timeout_ms > options_.peer_timeout_ms &&
          std::abs(timeout_ms - o->timeout_logged_ms) * 5 > timeout_ms) {
        LogInfo("peer %s: failure timeout %.1f s (link retransmission timeout %d ms)", peer,
                timeout_ms / 1000.0, rto_ms);
        o->timeout_logged_ms = timeout_ms;
      }
    }
    if (o->dialing && o->dialing->Wait(absl::ZeroDuration())) {
      absl::StatusOr<std::unique_ptr<net::Link>> link = o->dialing->Take();
      o->dialing.reset();
      if (link.ok()) {
        o->link = *std::move(link);
        o->up_ms = now_ms;
        o->warned = false;
        for (const auto& [ms, env] : o->queued) {
          // Older ones belong to a round of the protocol that has moved on.
          if (now_ms - ms > options_.proposal_timeout_ms) continue;
          o->link->connection().SetEpoch(env.epoch);
          (void)o->link->connection().SendOwned(net::FrameType::kControl, EncodeEnvelope(env));
        }
        o->queued.clear();
      } else {
        const bool fatal =
            absl::IsFailedPrecondition(link.status()) || absl::IsPermissionDenied(link.status());
        // Other settings: the node logged the difference; the Membership decides.
        const bool settings = absl::StartsWith(link.status().message(), net::kFingerprintDiffers);
        if (fatal && !o->warned && !settings) {
          LogError("control link to %s: %s", peer, std::string(link.status().message()));
          o->warned = true;
        }
        o->queued.clear();
        o->dial_after_ms = now_ms + (fatal ? 5000 : 0);
      }
    }
    if (!o->link && !o->dialing && now_ms >= o->dial_after_ms) {
      o->dialing = node_->ConnectTo(static_cast<int>(r), options_.channel, absl::Now() + kDialSpan);
    }
  }
}

void MembershipService::PollRefusals(int64_t now_ms) {
  for (const net::FingerprintMismatch& m : node_->FingerprintMismatches()) {
    absl::Time& seen = refusals_seen_[m.endpoint];
    if (m.last_refused <= seen) continue;
    seen = m.last_refused;
    const std::vector<uint8_t> theirs = net::EncodeFingerprint(m.theirs);
    membership_->OnConfigRefused(m.endpoint, Crc32c(theirs.data(), theirs.size()), m.difference,
                                 now_ms);
  }
}

void MembershipService::SendOut(const Outgoing& o, int64_t now_ms) {
  const int rank = RankOfPeer(o.to);
  if (rank < 0 || rank == node_->self_rank() || Blocked(o.to)) return;
  OutLink* out = out_[rank].get();
  const Envelope& envelope = WithReport(o.envelope, out, now_ms);
  if (out->link) {
    out->link->connection().SetEpoch(envelope.epoch);
    absl::Status st =
        out->link->connection().SendOwned(net::FrameType::kControl, EncodeEnvelope(envelope));
    if (st.ok()) return;
    out->link.reset();
    out->dial_after_ms = now_ms;
    membership_->OnLinkBroken(o.to, now_ms);
    return;
  }
  out->queued.emplace_back(now_ms, envelope);
  while (out->queued.size() > options_.max_queued_per_peer) out->queued.pop_front();
}

const Envelope& MembershipService::WithReport(const Envelope& e, OutLink* out, int64_t now_ms) {
  if (!std::holds_alternative<Heartbeat>(e.message)) return e;
  std::lock_guard<std::mutex> lock(mu_);
  if (local_report_.empty()) return e;
  const bool changed = out->report_version_sent != local_report_version_;
  if (!changed && now_ms - out->report_sent_ms < kReportRefreshMs) return e;
  out->report_version_sent = local_report_version_;
  out->report_sent_ms = now_ms;
  report_envelope_ = e;
  std::get<Heartbeat>(report_envelope_.message).report = local_report_;
  return report_envelope_;
}

void MembershipService::Drain(int64_t now_ms) {
  // Sending may report broken links, which may queue more: loop until quiet.
  for (int round = 0; round < 4; ++round) {
    std::vector<Outgoing> outgoing = membership_->TakeOutgoing();
    std::vector<Decision> decisions = membership_->TakeDecisions();
    if (outgoing.empty() && decisions.empty()) break;
    for (const Outgoing& o : outgoing) SendOut(o, now_ms);
    for (const Decision& d : decisions) Publish(d);
  }
  const Membership& m = *membership_;
  {
    std::lock_guard<std::mutex> lock(mu_);
    view_ = m.view();
    can_train_ = m.CanTrain();
    pause_reason_ = m.pause_reason();
    phase_ = m.phase();
    agreed_hosts_ = m.agreed_hosts();
    peer_reports_.clear();
    for (size_t r = 0; r < node_peers_.size(); ++r) {
      if (static_cast<int>(r) == node_->self_rank() || r >= out_.size() || !out_[r]) continue;
      RemoteReport p;
      p.peer = node_peers_[r];
      p.alive = m.IsAlive(p.peer, now_ms);
      p.in_view = m.view().Contains(p.peer);
      peer_reports_.push_back(std::move(p));
    }
  }
  state_cv_.notify_all();
}

void MembershipService::Publish(const Decision& d) {
  switch (d.kind) {
    case Decision::kInstallView: {
      std::vector<PeerId> joined, left;
      for (const auto& p : d.view.members) {
        if (!last_logged_view_.Contains(p)) joined.push_back(p);
      }
      for (const auto& p : last_logged_view_.members) {
        if (!d.view.Contains(p)) left.push_back(p);
      }
      LogInfo(
          "view change: epoch %d, members [%s], leader %s, left: %s, joined: %s, resume %s "
          "from %s%s",
          d.view.epoch, PeerNames(d.view.members), d.view.leader(), PeerNames(left),
          PeerNames(joined), d.agreement.resume.ToString(), d.agreement.source,
          d.need_state ? " (fetching state)" : "");
      last_logged_view_ = d.view;
      break;
    }
    case Decision::kPause:
      // Waiting for peers before the first view (or to be admitted) is how every
      // start looks; a member that stops training is news.
      if (membership_->view().Contains(self_)) {
        LogWarning("paused: %s", d.reason);
      } else {
        LogInfo("not training yet: %s", d.reason);
      }
      break;
    case Decision::kExcluded:
      LogWarning("excluded from the view: %s", d.reason);
      last_logged_view_ = View{};
      break;
    case Decision::kWarning:
      LogWarning("%s", d.reason);
      break;
    case Decision::kSuspect:
      LogInfo("suspect %s: %s", d.peer, d.reason);
      break;
    case Decision::kStopTraining:
    case Decision::kLeave:
      LogInfo("%s: %s", DecisionKindName(d.kind), d.reason);
      break;
    case Decision::kPeerLeft:
      LogInfo("peer %s %s", d.peer, d.reason);
      break;
    case Decision::kConfigMismatch:
      break;  // the trainer exits with it: the last line the user sees
  }
  if (options_.on_decision) options_.on_decision(d);
  {
    std::lock_guard<std::mutex> lock(mu_);
    decisions_.push_back(d);
    if (decisions_.size() > 4096) decisions_.pop_front();  // nobody is reading them
  }
  state_cv_.notify_all();
}

}  // namespace rt::cluster
