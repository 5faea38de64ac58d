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
#include "train/elastic_reducer_internal.h"
#include "train/stop_signals.h"

namespace rt::train {
using elastic_internal::kPoll;
using elastic_internal::kWaitLogEveryMs;
namespace {

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
  if (!cluster::EndsView(d.kind)) return;
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

std::optional<cluster::Decision> ElasticReducer::NextDecision(absl::Duration timeout) {
  if (!pending_.empty()) {
    cluster::Decision d = std::move(pending_.front());
    pending_.pop_front();
    return d;
  }
  return service_->NextDecision(timeout);
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
