// The elastic reducer's view installation (see elastic_reducer.h): serving or fetching
// the agreed state, loading it, and forming the view's ring while watching for a newer
// decision. The step itself and the boundaries are in elastic_reducer.cc.
#include "train/elastic_reducer.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/clock.h"
#include "core/log.h"
#include "core/status_macros.h"
#include "train/elastic_reducer_internal.h"
#include "train/stop_signals.h"

namespace rt::train {
using cluster::PeerNames;
using elastic_internal::kFormPoll;
using elastic_internal::kStepSection;

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
                bytes / 1e6, PeerNames(a.need_state), watch.ElapsedMs());
      } else {
        LogWarning("state transfer: serving %s to %s failed: %s", a.resume.ToString(),
                   PeerNames(a.need_state), std::string(st.message()));
      }
    }
  }
  if (d.need_state) {
    Stopwatch watch;
    // A peer that has not trained yet (a joiner) leaves on a stop request at once, as
    // FormRing does, instead of after the whole transfer (minutes for a large model
    // on a slow link). Once it has trained, a stop waits for the ring (the stop vote).
    const bool watch_stop = options_.watch_signals && last_step_ms_ < 0;
    if (watch_stop) transfer.stop = [] { return StopRequested(); };
    if (options_.board) {
      options_.board->SetActivity("receiving_state",
                                  absl::StrCat(a.resume.ToString(), " from ", a.source));
    }
    absl::StatusOr<cluster::StateSnapshot> snap = cluster::FetchAgreedState(node, d, transfer);
    if (options_.board) options_.board->SetActivity("");
    absl::Status st = snap.ok() ? LoadSnapshot(*snap) : snap.status();
    if (absl::IsCancelled(st) && watch_stop && StopRequested()) {
      // AtStepBoundary, finding no ring and the stop request, leaves the job.
      LogInfo("state transfer: stop requested while fetching %s from %s: giving up the transfer",
              a.resume.ToString(), a.source);
      return absl::OkStatus();
    }
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
  if (outer_codec_) RETURN_IF_ERROR(inner->UseRoundSync(outer_codec_, outer_shard_));
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
      v.epoch, size, PeerNames(v.members), v.leader(), position, a.resume.step, lost);
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
  // A formation given up is cancelled and joined here, never left running detached:
  // a detached one kept the node (its listener, io threads, handshakes, sealed links)
  // alive for up to `wait` after this reducer, and after main() had returned in
  // `train`. OpenSSL used on those threads while exit() runs OPENSSL_cleanup crashes
  // the process (a test program that hashes on a thread while main returns: SIGSEGV
  // in 185 of 200 runs); the likely cause of a peer's SIGSEGV at a final SIGTERM after
  // a rejoin (views superseded during the rejoin left formations behind).
  auto cancel = std::make_shared<std::atomic<bool>>(false);
  std::thread former(
      [node = options_.node, order = std::move(order), channel, wait, result, cancel] {
        absl::StatusOr<std::unique_ptr<net::TcpRing>> ring = net::TcpRing::Form(
            node, order, channel, wait, absl::Seconds(5), [cancel] { return cancel->load(); });
        std::lock_guard<std::mutex> lock(result->mu);
        result->ring = std::move(ring);
        result->done = true;
      });
  // Cancels the formation (it returns within ~100 ms) and waits for it; a ring it
  // formed meanwhile is closed with `result`.
  auto give_up = [&] {
    cancel->store(true);
    former.join();
  };
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
      give_up();
      return absl::CancelledError("stop requested (signal)");
    }
    std::optional<cluster::Decision> d = service_->NextDecision(kFormPoll);
    if (!d || d->kind == cluster::Decision::kSuspect || d->kind == cluster::Decision::kWarning) {
      continue;  // logged by the service; a change that matters follows as its own decision
    }
    // The cluster moved on: give the formation up and handle `d`.
    pending_.push_back(*std::move(d));
    give_up();
    return absl::CancelledError(absl::StrCat("the cluster moved on (",
                                             cluster::DecisionKindName(pending_.back().kind), ": ",
                                             pending_.back().reason, ")"));
  }
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

}  // namespace rt::train
