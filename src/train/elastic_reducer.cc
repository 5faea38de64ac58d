// The elastic ring's GradientReducer (see elastic_reducer.h for the design).
#include "train/elastic_reducer.h"

#include <algorithm>
#include <cstring>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "cluster/checkpoint_duty.h"
#include "core/clock.h"
#include "core/log.h"
#include "core/status_macros.h"
#include "train/stop_signals.h"

namespace rt::train {
namespace {

int64_t NowMs() { return NowNs() / 1000000; }

constexpr char kStepSection[] = "step";
// How often the wait for a view polls for decisions and signals, and logs.
constexpr absl::Duration kPoll = absl::Milliseconds(100);
constexpr int64_t kWaitLogEveryMs = 10000;
// How often a ring formation checks for a newer decision.
constexpr absl::Duration kFormPoll = absl::Milliseconds(20);

std::string Names(const std::vector<cluster::PeerId>& peers) {
  return peers.empty() ? "none" : absl::StrJoin(peers, " ");
}

// Errors that a new view cannot fix: the replicas or the data are wrong.
bool IsFatalStepError(const absl::Status& s) {
  return absl::IsInternal(s) || absl::IsInvalidArgument(s) || absl::IsOutOfRange(s);
}

}  // namespace

absl::StatusOr<std::unique_ptr<ElasticReducer>> ElasticReducer::Create(ElasticOptions options) {
  if (!options.node) return absl::InvalidArgumentError("ElasticReducer needs a started TcpNode");
  if (!options.make_reducer) return absl::InvalidArgumentError("ElasticReducer needs make_reducer");
  if (options.peer_timeout_ms < 100) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "--peer-timeout must be at least 0.1 s, got %g s", options.peer_timeout_ms / 1000.0));
  }
  if (options.min_peers < 0 || options.min_peers > options.node->num_hosts()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("--min-peers %d must be in 0..%d (the hosts in the file)",
                        options.min_peers, options.node->num_hosts()));
  }
  if (!(options.wait > absl::ZeroDuration())) {
    return absl::InvalidArgumentError("--wait must be positive seconds");
  }
  std::string warning = cluster::MinPeersWarning(options.node->num_hosts(), options.min_peers);
  if (!warning.empty()) LogWarning("%s", warning);
  return std::unique_ptr<ElasticReducer>(new ElasticReducer(std::move(options)));
}

ElasticReducer::ElasticReducer(ElasticOptions options) : options_(std::move(options)) {
  self_ = options_.node->self_endpoint();
  leader_rank_ = options_.node->self_rank();
  if (options_.board) {
    options_.board->SetSelf(self_);
    status_responder_ = std::make_unique<observe::StatusResponder>(options_.node, options_.board);
  }
}

ElasticReducer::~ElasticReducer() {
  status_responder_.reset();
  if (options_.board) {  // before the service goes: the board calls into it
    options_.board->SetClusterSource(nullptr);
    options_.board->SetReportSink(nullptr);
  }
  DropRing("");
  if (service_) service_->Stop();
}

observe::ClusterFacts ElasticReducer::Facts() const {
  observe::ClusterFacts f;
  const cluster::View v = service_->view();
  f.epoch = v.epoch;
  f.members = v.members;
  f.leader = v.leader();
  f.hosts = service_->agreed_hosts();
  f.quorum = cluster::QuorumSize(static_cast<int>(f.hosts.size()), options_.min_peers);
  f.can_train = service_->CanTrain();
  f.phase = service_->phase();
  f.pause_reason = service_->pause_reason();
  f.peers = service_->PeerReports();
  return f;
}

// ---------------------------------------------------------------- the step

absl::Status ElasticReducer::BeginStep(int64_t step, absl::Span<float> grads) {
  if (!inner_) return absl::UnavailableError("no ring: the view changed before the step began");
  stop_after_step_ = false;
  return inner_->BeginStep(step, grads);
}

void ElasticReducer::OnGradReady(size_t offset) {
  if (inner_) inner_->OnGradReady(offset);
}

absl::Status ElasticReducer::Finish(StepTotals* totals) {
  if (!inner_) return absl::UnavailableError("no ring: the view changed during the step");
  const bool vote = options_.watch_signals && StopRequested();
  if (vote) totals->tokens += kStopVote;
  if (totals->checkpoint_vote) totals->tokens += kCheckpointVote;
  RETURN_IF_ERROR(inner_->Finish(totals));
  totals->checkpoint_vote = totals->tokens >= kCheckpointVote;
  totals->tokens %= kCheckpointVote;
  const int64_t votes = totals->tokens / kStopVote;
  totals->tokens %= kStopVote;
  if (votes > 0 && !stop_after_step_) {
    LogInfo("stop requested by %d of %d peers: every peer stops after this step", votes, size_);
  }
  stop_after_step_ = votes > 0;
  return absl::OkStatus();
}

absl::Status ElasticReducer::CheckParamHash(int64_t step, uint64_t param_hash) {
  if (!inner_) return absl::UnavailableError("no ring: the view changed during the step");
  return inner_->CheckParamHash(step, param_hash);
}

absl::StatusOr<double> ElasticReducer::GradSumOfSquares(absl::Span<const float> grads) {
  if (!inner_) return absl::UnavailableError("no ring: the view changed during the step");
  return inner_->GradSumOfSquares(grads);
}

absl::Status ElasticReducer::AllgatherOwned(absl::Span<float> params) {
  if (!inner_) return absl::UnavailableError("no ring: the view changed during the step");
  return inner_->AllgatherOwned(params);
}

absl::StatusOr<collective::PieceExchangeResult> ElasticReducer::ExchangePieces(
    size_t length, int buffers, const std::vector<collective::FloatRange>& held,
    const std::vector<collective::FloatRange>& needed, const collective::PieceReader& read,
    const collective::PieceWriter& write) {
  if (!inner_) return absl::UnavailableError("no ring: the view changed before the step began");
  return inner_->ExchangePieces(length, buffers, held, needed, read, write);
}

void ElasticReducer::StateRewound(int64_t step) {
  version_ = {view_.epoch, step};
  service_->SetState(version_);
  last_step_done_ = step;
}

uint64_t ElasticReducer::bytes_sent() const {
  return bytes_before_ + (inner_ ? inner_->bytes_sent() : 0);
}

absl::Status ElasticReducer::StepFailed(const absl::Status& error) {
  if (IsFatalStepError(error)) return error;
  if (++consecutive_failures_ > kMaxConsecutiveFailures) {
    return absl::Status(error.code(),
                        absl::StrFormat("%d steps in a row failed, giving up; the last: %s",
                                        consecutive_failures_, error.message()));
  }
  const bool announced = aborted_.load();
  LogWarning("step failed in view epoch %d (%s): %s; redoing it in the next view", view_.epoch,
             announced ? "view change announced" : "ring failure", std::string(error.message()));
  DropRing("step failed");
  // A failure without a view change (one broken ring link, a garbled frame) must be
  // reported, or nobody would propose a new view: see AtStepBoundary.
  failed_at_ms_ = NowMs();
  return absl::OkStatus();
}

void ElasticReducer::Completed(int64_t step, bool boundary) {
  if (inner_) inner_->StepCompleted(step);  // the step's residuals are final
  version_ = {view_.epoch, step};
  if (boundary) {
    service_->StepCompleted(version_);
  } else {
    service_->SetState(version_);  // no admission: the replicas differ between outer steps
  }
  consecutive_failures_ = 0;
  failed_at_ms_ = -1;
  last_step_ms_ = NowMs();
  last_step_done_ = std::max(last_step_done_, step);
  const bool finished = options_.steps > 0 && step >= options_.steps;
  if (finished || stop_after_step_) {
    // Every member completes this step and stops after it: say so now, so that the
    // others finish too rather than suspect this peer when its links close.
    service_->Leave(finished
                        ? absl::StrFormat("finished training at step %d", step)
                        : absl::StrFormat("stopped after step %d (a stop was requested)", step),
                    step);
  }
}

bool ElasticReducer::WritesCheckpoints() const {
  if (removed_) return false;
  const cluster::CheckpointDuty duty =
      cluster::CheckpointDutyOf(view_, self_, options_.ckpt_shared);
  if (duty.is_copy && options_.ckpt_dir_shared_with &&
      options_.ckpt_dir_shared_with(view_.leader())) {
    if (shared_with_warned_ != view_.leader()) {
      shared_with_warned_ = view_.leader();
      LogWarning(
          "--ckpt-dir is shared with the leader %s (its marker is live in it: NFS, or peers on "
          "one machine) and --ckpt-shared was not given: handled as --ckpt-shared, this peer "
          "writes no second copy",
          view_.leader());
    }
    return false;
  }
  return duty.write;
}

// ---------------------------------------------------------------- boundaries

absl::Status ElasticReducer::AttachState(const TrainStateRef& state, uint64_t loaded_epoch) {
  if (state.step == nullptr) return absl::InvalidArgumentError("AttachState without a step");
  if (service_) return absl::FailedPreconditionError("AttachState called twice");
  state_ = state;
  version_ = {loaded_epoch, *state.step};
  cluster::MembershipServiceOptions o;
  o.node = options_.node;
  o.min_peers = options_.min_peers;
  o.peer_timeout_ms = options_.peer_timeout_ms;
  o.heartbeat_interval_ms = std::clamp<int64_t>(options_.peer_timeout_ms / 10, 10, 300);
  o.proposal_timeout_ms = std::max<int64_t>(250, options_.peer_timeout_ms / 2);
  o.startup_grace_ms = options_.startup_grace_ms;
  o.initial_epoch = loaded_epoch;
  o.initial_state = version_;
  o.on_decision = [this](const cluster::Decision& d) { OnDecision(d); };
  ASSIGN_OR_RETURN(service_, cluster::MembershipService::Start(std::move(o)));
  if (options_.board) {
    cluster::MembershipService* service = service_.get();
    options_.board->SetReportSink(
        [service](std::vector<uint8_t> report) { service->SetLocalReport(std::move(report)); });
    options_.board->SetClusterSource([this] { return Facts(); });
  }
  LogInfo("membership started: this peer is %s, holding %s; peer timeout %.1f s, quorum %d of %d",
          self_, version_.ToString(), options_.peer_timeout_ms / 1000.0,
          cluster::QuorumSize(options_.node->num_hosts(), options_.min_peers),
          options_.node->num_hosts());
  return absl::OkStatus();
}

absl::StatusOr<BoundaryAction> ElasticReducer::AtStepBoundary() {
  if (!service_) return absl::FailedPreconditionError("AtStepBoundary before AttachState");
  const int64_t start_ms = NowMs();
  int64_t next_log_ms = start_ms + kWaitLogEveryMs;
  while (true) {
    MaybeReloadHosts();
    // Every queued decision first; wait for one (briefly) only while there is no ring.
    std::optional<cluster::Decision> d = NextDecision(inner_ ? absl::ZeroDuration() : kPoll);
    if (d) {
      RETURN_IF_ERROR(Handle(*d));
      if (left_) return BoundaryAction::kStop;
      continue;
    }
    if (inner_) return BoundaryAction::kTrain;
    const int64_t now = NowMs();
    if (options_.watch_signals && StopRequested()) {
      LogInfo("stop requested while not in a training ring: leaving the job alone");
      service_->Leave("left: stop requested (signal)");
      left_ = true;
      return BoundaryAction::kStop;
    }
    // A step failed but no view change followed: the ring broke where the
    // membership cannot see it. Declaring the view disrupted makes the leader
    // propose a new one.
    if (failed_at_ms_ >= 0 && now - failed_at_ms_ > options_.peer_timeout_ms) {
      LogWarning("the ring failed without a view change: reporting view epoch %d as disrupted",
                 view_.epoch);
      service_->StateTransferFailed(version_);
      failed_at_ms_ = -1;
    }
    if (now - start_ms > absl::ToInt64Milliseconds(options_.wait)) {
      const std::string why = service_->pause_reason();
      return absl::DeadlineExceededError(absl::StrFormat(
          "not admitted to a training view within --wait %.0f s (%s); this peer holds %s",
          absl::ToDoubleSeconds(options_.wait), why.empty() ? "no view was installed" : why,
          version_.ToString()));
    }
    if (now >= next_log_ms) {
      const std::string why = service_->pause_reason();
      LogInfo("not training for %.0f s: %s", (now - start_ms) / 1000.0,
              why.empty() ? "waiting for a view" : why);
      next_log_ms = now + kWaitLogEveryMs;
    }
  }
}

void ElasticReducer::OnDecision(const cluster::Decision& d) {
  if (options_.board) options_.board->OnDecision(d);
  switch (d.kind) {
    case cluster::Decision::kStopTraining:
    case cluster::Decision::kPause:
    case cluster::Decision::kInstallView:
    case cluster::Decision::kExcluded:
    case cluster::Decision::kLeave:
      break;
    default:
      return;
  }
  std::lock_guard<std::mutex> lock(ring_mu_);
  if (live_ == nullptr) return;
  if (d.kind == cluster::Decision::kInstallView && d.view.epoch <= live_epoch_) return;
  live_->Abort(absl::AbortedError(
      absl::StrCat("view change (", cluster::DecisionKindName(d.kind), ": ", d.reason, ")")));
  aborted_.store(true);
}

absl::Status ElasticReducer::Handle(const cluster::Decision& d) {
  switch (d.kind) {
    case cluster::Decision::kInstallView:
      failed_at_ms_ = -1;
      return Install(d);
    case cluster::Decision::kStopTraining:
      failed_at_ms_ = -1;
      DropRing(d.reason);
      return absl::OkStatus();
    case cluster::Decision::kPause:
      DropRing(d.reason);
      return absl::OkStatus();
    case cluster::Decision::kExcluded:
      failed_at_ms_ = -1;
      DropRing(d.reason);
      // This peer's state may belong to a line of history the quorum abandoned.
      version_ = {0, -1};
      service_->SetState(version_);
      view_ = cluster::View{};
      LogWarning("excluded (%s): discarding the training state; it will be fetched on rejoining",
                 d.reason);
      return absl::OkStatus();
    case cluster::Decision::kLeave:
      DropRing(d.reason);
      LogInfo("leaving the job: %s", d.reason);
      left_ = true;
      removed_ = true;  // no checkpoint duty any more
      return absl::OkStatus();
    case cluster::Decision::kConfigMismatch:
      return absl::FailedPreconditionError(d.reason);
    case cluster::Decision::kSuspect:
    case cluster::Decision::kWarning:
    case cluster::Decision::kPeerLeft:
      return absl::OkStatus();  // the service logged it; kStopTraining/kPause follow
  }
  return absl::OkStatus();
}

absl::Status ElasticReducer::Install(const cluster::Decision& d) {
  DropRing("new view");
  const cluster::View& v = d.view;
  const cluster::StepAgreement& a = d.agreement;
  const auto& node = options_.node;
  const bool serve = a.source == self_ && !a.need_state.empty();
  // Either side gives up waiting for the other once a newer decision is queued: the
  // other side has moved on (or will), and the newer view is handled next.
  cluster::TransferOptions transfer = options_.transfer;
  cluster::MembershipService* service = service_.get();
  transfer.superseded = [service] { return service->ViewSuperseded(); };
  if (serve) {
    if (version_ != a.resume) {
      // This peer moved on after the view was agreed: under round sync an inner step
      // needs no ring, so one announced too late to stop it completes. Answer the
      // fetchers with a refusal ("this peer holds ..."), so that they fail at once and
      // the view with this peer's state that the membership proposes next is installed
      // in milliseconds. Not serving at all left each fetcher waiting out the transfer's
      // timeouts (seconds per view), during which the next views went stale too.
      LogWarning("asked to serve %s but this peer holds %s: refusing, a new view follows",
                 a.resume.ToString(), version_.ToString());
      (void)cluster::ServeAgreedState(node, d, Snapshot(), transfer);
    } else {
      Stopwatch watch;
      cluster::StateSource source = Snapshot();
      uint64_t bytes = 0;
      for (const auto& s : source.sections) bytes += s.bytes.size();
      absl::Status st = cluster::ServeAgreedState(node, d, source, transfer);
      if (st.ok()) {
        LogInfo("state transfer: served %s (%.1f MB) to %s in %.0f ms", a.resume.ToString(),
                bytes / 1e6, Names(a.need_state), watch.ElapsedMs());
      } else {
        LogWarning("state transfer: serving %s to %s failed: %s", a.resume.ToString(),
                   Names(a.need_state), std::string(st.message()));
      }
    }
  }
  if (d.need_state) {
    Stopwatch watch;
    if (options_.board) {
      options_.board->SetActivity("receiving_state",
                                  absl::StrCat(a.resume.ToString(), " from ", a.source));
    }
    absl::StatusOr<cluster::StateSnapshot> snap = cluster::FetchAgreedState(node, d, transfer);
    if (options_.board) options_.board->SetActivity("");
    absl::Status st = snap.ok() ? LoadSnapshot(*snap) : snap.status();
    if (absl::IsCancelled(st) && service->ViewSuperseded()) {
      // Not a failure to report: the queued decision replaces this view.
      LogInfo("state transfer: view epoch %d was superseded before %s arrived", v.epoch,
              a.resume.ToString());
      return absl::OkStatus();
    }
    if (!st.ok()) {
      LogWarning("state transfer: fetching %s from %s failed: %s", a.resume.ToString(), a.source,
                 std::string(st.message()));
      service_->StateTransferFailed(version_);
      return absl::OkStatus();
    }
    uint64_t bytes = 0;
    for (const auto& s : snap->sections) bytes += s.bytes.size();
    LogInfo("state transfer: received %s (%.1f MB) from %s in %.0f ms", a.resume.ToString(),
            bytes / 1e6, a.source, watch.ElapsedMs());
    if (options_.board) {
      observe::ClusterEvent e;
      e.kind = "state_transfer";
      e.epoch = v.epoch;
      e.step = a.resume.step;
      e.message = absl::StrFormat("received the state of step %d (%.1f MB) from %s in %.0f ms",
                                  a.resume.step, bytes / 1e6, a.source, watch.ElapsedMs());
      options_.board->Record(std::move(e));
    }
    version_ = a.resume;
    service_->SetState(version_);
  } else if (version_ != a.resume || *state_.step != a.resume.step) {
    LogError("view epoch %d resumes from %s but this peer holds %s (step %d) and was not sent it",
             v.epoch, a.resume.ToString(), version_.ToString(), *state_.step);
    service_->StateTransferFailed(version_);
    return absl::OkStatus();
  }

  // The ring of the view, on its own channel.
  std::vector<int> order;
  for (const cluster::PeerId& m : v.members) {
    const int r = cluster::NodeRankOf(*node, m);
    if (r < 0) {
      LogWarning("view epoch %d has member %s, which this peer cannot link to", v.epoch, m);
      service_->StateTransferFailed(version_);
      return absl::OkStatus();
    }
    order.push_back(r);
  }
  const absl::Duration form_wait =
      a.need_state.empty() ? absl::Milliseconds(2 * options_.peer_timeout_ms) + absl::Seconds(5)
                           : options_.wait;
  absl::StatusOr<std::unique_ptr<net::TcpRing>> ring =
      FormRing(order, cluster::RingChannel(v), form_wait);
  if (absl::IsCancelled(ring.status())) {
    LogInfo("gave up forming the ring of view epoch %d: %s", v.epoch,
            std::string(ring.status().message()));
    return absl::OkStatus();
  }
  if (!ring.ok()) {
    LogWarning("the ring of view epoch %d did not form: %s", v.epoch,
               std::string(ring.status().message()));
    service_->StateTransferFailed(version_);
    return absl::OkStatus();
  }
  (*ring)->SetEpoch(v.epoch);
  const int position = (*ring)->rank(), size = (*ring)->size();
  ASSIGN_OR_RETURN(std::unique_ptr<GradientReducer> inner,
                   options_.make_reducer(*std::move(ring), v));
  if (preconditioner_) inner->SetPreconditioner(preconditioner_);
  view_ = v;
  position_ = position;
  size_ = size;
  // The leader's line in the agreed hosts file (node slots stop matching lines once a
  // line is removed from the middle of the file at run time).
  leader_rank_ = cluster::RankOf(service_->agreed_hosts(), v.leader());
  if (leader_rank_ < 0) leader_rank_ = cluster::NodeRankOf(*node, v.leader());
  inner_ = std::move(inner);
  {
    std::lock_guard<std::mutex> lock(ring_mu_);
    live_ = inner_.get();
    live_epoch_ = v.epoch;
  }
  aborted_.store(false);
  const int64_t now = NowMs();
  std::string lost;
  if (last_step_ms_ >= 0) {
    lost = absl::StrFormat("; %.2f s since this peer completed step %d",
                           (now - last_step_ms_) / 1000.0, last_step_done_);
  }
  LogInfo(
      "training in view epoch %d: %d peers [%s], leader %s, this peer at position %d; "
      "resuming after step %d%s",
      v.epoch, size, Names(v.members), v.leader(), position, a.resume.step, lost);
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<net::TcpRing>> ElasticReducer::FormRing(std::vector<int> order,
                                                                       uint64_t channel,
                                                                       absl::Duration wait) {
  struct Result {
    std::mutex mu;
    bool done = false;
    absl::StatusOr<std::unique_ptr<net::TcpRing>> ring = absl::UnknownError("forming");
  };
  auto result = std::make_shared<Result>();
  std::thread former([node = options_.node, order = std::move(order), channel, wait, result] {
    absl::StatusOr<std::unique_ptr<net::TcpRing>> ring =
        net::TcpRing::Form(node, order, channel, wait);
    std::lock_guard<std::mutex> lock(result->mu);
    result->ring = std::move(ring);
    result->done = true;
  });
  while (true) {
    {
      std::lock_guard<std::mutex> lock(result->mu);
      if (result->done) {
        former.join();
        return std::move(result->ring);
      }
    }
    if (options_.watch_signals && StopRequested() && last_step_ms_ < 0) {
      // Before this process's first step, AtStepBoundary then leaves the job: a peer
      // whose partners never link up (a wrong hosts file, a firewall) stops now, not
      // after the whole form wait. Once it has trained, a stop waits for the ring, so
      // that every peer stops after the same step (the stop vote).
      former.detach();
      return absl::CancelledError("stop requested (signal)");
    }
    std::optional<cluster::Decision> d = service_->NextDecision(kFormPoll);
    if (!d || d->kind == cluster::Decision::kSuspect || d->kind == cluster::Decision::kWarning) {
      continue;  // logged by the service; a change that matters follows as its own decision
    }
    // The cluster moved on: leave the formation to finish (or time out) on its own
    // (it owns its copies; a ring it forms late is closed at once) and handle `d`.
    pending_.push_back(*std::move(d));
    former.detach();
    return absl::CancelledError(absl::StrCat("the cluster moved on (",
                                             cluster::DecisionKindName(pending_.back().kind), ": ",
                                             pending_.back().reason, ")"));
  }
}

std::optional<cluster::Decision> ElasticReducer::NextDecision(absl::Duration timeout) {
  if (!pending_.empty()) {
    cluster::Decision d = std::move(pending_.front());
    pending_.pop_front();
    return d;
  }
  return service_->NextDecision(timeout);
}

// ---------------------------------------------------------------- state

cluster::StateSource ElasticReducer::Snapshot() {
  const int64_t step = *state_.step;
  std::memcpy(step_bytes_, &step, sizeof(step));
  cluster::StateSource src;
  src.version = version_;
  src.sections.push_back({kStepSection, absl::Span<const uint8_t>(step_bytes_, 8)});
  for (const auto& [name, buf] : state_.buffers) {
    src.sections.push_back(
        {name, absl::Span<const uint8_t>(reinterpret_cast<const uint8_t*>(buf.data()),
                                         buf.size() * sizeof(float))});
  }
  return src;
}

absl::Status ElasticReducer::LoadSnapshot(const cluster::StateSnapshot& snap) {
  // Check everything before touching the buffers: a bad copy leaves the state as it was.
  const cluster::StateSection* step = snap.Find(kStepSection);
  if (step == nullptr || step->bytes.size() != 8) {
    return absl::DataLossError("received state has no 8-byte 'step' section");
  }
  int64_t s = 0;
  std::memcpy(&s, step->bytes.data(), 8);
  if (s != snap.version.step) {
    return absl::DataLossError(absl::StrFormat("received state says step %d inside, %s outside", s,
                                               snap.version.ToString()));
  }
  for (const auto& [name, buf] : state_.buffers) {
    const cluster::StateSection* sec = snap.Find(name);
    if (sec == nullptr) return absl::DataLossError("received state has no section " + name);
    if (sec->bytes.size() != buf.size() * sizeof(float)) {
      return absl::DataLossError(
          absl::StrFormat("received section %s has %d bytes, this peer's buffer %d", name,
                          sec->bytes.size(), buf.size() * sizeof(float)));
    }
  }
  if (state_.before_overwrite) state_.before_overwrite();
  for (const auto& [name, buf] : state_.buffers) {
    const cluster::StateSection* sec = snap.Find(name);
    if (!sec->bytes.empty()) std::memcpy(buf.data(), sec->bytes.data(), sec->bytes.size());
  }
  *state_.step = s;
  return absl::OkStatus();
}

void ElasticReducer::DropRing(const std::string& why) {
  {
    std::lock_guard<std::mutex> lock(ring_mu_);
    live_ = nullptr;
  }
  if (inner_) {
    bytes_before_ += inner_->bytes_sent();
    inner_.reset();
    if (!why.empty()) LogDebug("ring of view epoch %d closed: %s", view_.epoch, why);
  }
  aborted_.store(false);
}

void ElasticReducer::MaybeReloadHosts() {
  if (!options_.watch_signals || !TakeHostsReloadRequest()) return;
  if (options_.hosts_path.empty()) return;
  absl::Status st = service_->HostsFileChanged(options_.hosts_path);
  if (st.ok()) {
    LogInfo("SIGHUP: re-read hosts file %s", options_.hosts_path);
  } else {
    LogWarning("SIGHUP: hosts file %s refused, nothing changes: %s", options_.hosts_path,
               std::string(st.message()));
  }
}

}  // namespace rt::train
