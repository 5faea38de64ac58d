// Trainer under ZeRO-1 (--zero 1, trainer.h): the sharded optimizer step that stays
// undoable until the ring has it, the moving of optimizer pieces when the ring changes,
// and the gathering of the moments for a checkpoint.
//
// Why the step is split. A sharded step ends with an allgather of the updated
// parameters; a view change can break it half-way, when some peers already hold the
// whole update and others only part of it. Every peer then either still holds the
// state before the step untouched (parameters and moments: the new parameters were
// staged in the gradient buffer, the moments not yet moved), or holds it after the
// step. The membership resumes from the newest state a peer completed (cluster/
// step_agreement.h): if that is this step, a peer that did not complete it receives
// the parameters from the source and moves its moments on with the gradient pieces it
// kept (pending_), which exist on every peer because nobody can complete the
// allgather before every peer has staged its pieces; if it is the step before, the
// kept gradients are dropped and nothing needs undoing.
//
// Holdings. After a view change every member holds the moments of its old pieces
// (owned and replica) at the agreed step, or nothing (a joiner, a peer that received
// the state); a peer that resumed from a checkpoint holds all of them on disk; at step
// 0 every peer holds zeros everywhere. GradientReducer::ExchangePieces fills each
// member's new pieces from a holder: with two copies of every piece, any single lost
// peer loses nothing.
#include <algorithm>
#include <cstring>

#include "absl/strings/str_format.h"
#include "core/clock.h"
#include "core/log.h"
#include "core/status_macros.h"
#include "train/train_checkpoint.h"
#include "train/trainer.h"

namespace rt::train {
namespace {

std::vector<optim::FloatRange> MergeSorted(std::vector<optim::FloatRange> a,
                                           const std::vector<optim::FloatRange>& b) {
  a.insert(a.end(), b.begin(), b.end());
  std::sort(a.begin(), a.end());
  return a;
}

absl::Span<float> Moments(optim::AdamW& shard, int b) { return b == 0 ? shard.m() : shard.v(); }

}  // namespace

bool Trainer::IsCheckpointMoment(bool last, bool stop) const {
  return last || stop || checkpoint_agreed_ || Due(config_.ckpt_every);
}

std::vector<optim::FloatRange> Trainer::HeldMomentRanges() const {
  const size_t n = params_.size();
  if (step_ == 0) return {{0, n}};  // zeros: every peer holds them
  if (sharded_adam_ != nullptr && moments_step_ == step_) {
    return MergeSorted(sharded_adam_->ranges(),
                       replica_adam_ ? replica_adam_->ranges() : std::vector<optim::FloatRange>{});
  }
  if (resumed_checkpoint_ && resumed_checkpoint_->meta().step == step_) return {{0, n}};
  return {};
}

absl::Span<const float> Trainer::ReadFromCheckpoint(const ckpt::Checkpoint& from,
                                                    const char* section, optim::FloatRange range,
                                                    std::vector<float>* scratch) {
  const size_t len = range.second - range.first;
  scratch->resize(len);
  const absl::Status st = from.ReadSectionRange(
      section, range.first * sizeof(float),
      absl::MakeSpan(reinterpret_cast<uint8_t*>(scratch->data()), len * sizeof(float)));
  if (!st.ok()) {
    // Verified whole when it was opened: the file changed under this process since.
    // Sending anything else to the other peers would corrupt the run silently.
    LogError("cannot read the checkpoint this peer offered to the ring: %s", st.message());
    std::abort();
  }
  return *scratch;
}

absl::Span<const float> Trainer::ReadHeldMoments(int b, optim::FloatRange range) {
  const size_t len = range.second - range.first;
  std::vector<float>& scratch = read_scratch_[b];
  if (step_ == 0) {
    scratch.assign(len, 0.0f);
    return scratch;
  }
  if (sharded_adam_ != nullptr && moments_step_ == step_) {
    for (optim::ShardedAdamW* o : {sharded_adam_.get(), replica_adam_.get()}) {
      const int i = o ? o->RangeAt(range.first) : -1;
      if (i < 0) continue;
      const size_t offset = range.first - o->ranges()[i].first;
      return Moments(o->shard(i), b).subspan(offset, len);
    }
  }
  // The resumed checkpoint (HeldMomentRanges offered nothing else).
  return ReadFromCheckpoint(*resumed_checkpoint_, b == 0 ? "adam_m" : "adam_v", range, &scratch);
}

absl::Status Trainer::RewindToNewestCheckpoint(const std::vector<optim::FloatRange>& lost) {
  const size_t n = params_.size();
  size_t lost_floats = 0;
  for (const auto& r : lost) lost_floats += r.second - r.first;
  const std::string what = absl::StrFormat(
      "step %d: the optimizer state of %d floats (%.1f%%) is lost: its owner and its replica "
      "holder, ring neighbours, left together",
      step_ + 1, lost_floats, 100.0 * lost_floats / n);
  // Every member's newest valid checkpoint of this run; the ring goes back to the newest.
  std::optional<ckpt::Checkpoint> mine;
  if (!config_.ckpt_dir.empty()) {
    std::vector<std::string> problems;
    absl::StatusOr<ckpt::Checkpoint> latest =
        ckpt::OpenLatestValidCheckpoint(config_.ckpt_dir, &problems);
    if (latest.ok() && latest->meta().step <= step_ &&
        latest->SectionBytes("params") == params_.bytes() &&
        latest->SectionBytes("adam_m") == params_.bytes() &&
        latest->SectionBytes("adam_v") == params_.bytes()) {
      mine = *latest;
    }
  }
  ASSIGN_OR_RETURN(const std::vector<int64_t> steps,
                   reducer_->AllgatherInt64(mine ? mine->meta().step : -1));
  const int64_t back_to = *std::max_element(steps.begin(), steps.end());
  if (back_to < 0) {
    return absl::InternalError(absl::StrCat(
        what,
        ", and no member holds a checkpoint to go back to. Restart the peers with --resume "
        "from a copy of the newest checkpoint, or start over"));
  }
  if (mine && mine->meta().step != back_to) mine.reset();
  LogWarning("%s; the ring goes back to the newest checkpoint a member holds: step %d (%s)", what,
             back_to, mine ? mine->path() : "received from a member that holds it");
  // The parameters of that step from its holders, to every member.
  FinishBackgroundCheckpoint();  // it may still read the parameters
  const std::vector<optim::FloatRange> everything = {{0, n}};
  std::vector<float> scratch;
  auto read = [&](int, optim::FloatRange r) {
    return ReadFromCheckpoint(*mine, "params", r, &scratch);
  };
  auto write = [this](int, size_t offset, absl::Span<const float> floats) {
    std::memcpy(params_.data() + offset, floats.data(), floats.size() * sizeof(float));
  };
  ASSIGN_OR_RETURN(
      collective::PieceExchangeResult moved,
      reducer_->ExchangePieces(n, 1, mine ? everything : std::vector<optim::FloatRange>{},
                               everything, read, write));
  if (!moved.lost.empty()) return absl::InternalError(what + ": the checkpoint went missing too");
  // The state of that step: its moments come from the checkpoint's holders when
  // SettleShardedState fills this ring's pieces.
  step_ = back_to;
  tokens_seen_ = step_ * static_cast<int64_t>(sampler_->slots()) * gpt_->config().seq_len;
  last_checkpoint_step_ = step_;
  pending_.step = -1;
  moments_step_ = -1;
  sharded_adam_.reset();
  replica_adam_.reset();
  resumed_checkpoint_ = std::move(mine);
  balancer_->Reset();
  reducer_->StateRewound(step_);
  if (board_) board_->SetStep(step_);
  return SettleShardedState();
}

absl::Status Trainer::SettleShardedState() {
  const size_t n = params_.size();
  // 1. A step this peer staged but whose parameters did not all arrive.
  if (pending_.step >= 0) {
    if (step_ == pending_.step && moments_step_ == pending_.step - 1) {
      sharded_adam_->UpdateMoments(pending_.owned.span(), pending_.grad_scale);
      if (replica_adam_) replica_adam_->UpdateMoments(pending_.replica.span(), pending_.grad_scale);
      moments_step_ = step_;
      LogInfo(
          "step %d: completed by other peers after the ring broke; its optimizer update is "
          "applied to this peer's pieces too",
          step_);
    }
    pending_.step = -1;
  }
  // 2. This ring's pieces.
  const std::vector<optim::FloatRange> owned = reducer_->OwnedRanges(n);
  const std::vector<optim::FloatRange> replica = reducer_->ReplicaRanges(n);
  const std::vector<optim::FloatRange> no_ranges;
  if (sharded_adam_ != nullptr && moments_step_ == step_ && sharded_epoch_ == reducer_->epoch() &&
      sharded_adam_->ranges() == owned &&
      (replica_adam_ ? replica_adam_->ranges() : no_ranges) == replica) {
    return absl::OkStatus();
  }
  Stopwatch watch;
  const std::vector<optim::FloatRange> held = HeldMomentRanges();
  auto next_owned =
      std::make_unique<optim::ShardedAdamW>(config_.adamw, n, owned, gpt_->layout().DecayRanges());
  std::unique_ptr<optim::ShardedAdamW> next_replica;
  if (!replica.empty()) {
    next_replica = std::make_unique<optim::ShardedAdamW>(config_.adamw, n, replica,
                                                         gpt_->layout().DecayRanges());
  }
  auto write = [&](int b, size_t offset, absl::Span<const float> floats) {
    for (optim::ShardedAdamW* o : {next_owned.get(), next_replica.get()}) {
      const int i = o ? o->RangeAt(offset) : -1;
      if (i < 0) continue;
      absl::Span<float> dst = Moments(o->shard(i), b);
      std::memcpy(dst.data() + (offset - o->ranges()[i].first), floats.data(),
                  floats.size() * sizeof(float));
      return;
    }
  };
  auto read = [this](int b, optim::FloatRange r) { return ReadHeldMoments(b, r); };
  ASSIGN_OR_RETURN(collective::PieceExchangeResult moved,
                   reducer_->ExchangePieces(n, 2, held, MergeSorted(owned, replica), read, write));
  if (!moved.lost.empty()) return RewindToNewestCheckpoint(moved.lost);
  sharded_adam_ = std::move(next_owned);
  replica_adam_ = std::move(next_replica);
  moments_step_ = step_;
  sharded_epoch_ = reducer_->epoch();
  pending_.owned.Resize(sharded_adam_->owned_floats());
  pending_.replica.Resize(replica_adam_ ? replica_adam_->owned_floats() : 0);
  // Read once: later rings take the pieces from their members.
  resumed_checkpoint_.reset();
  LogInfo(
      "optimizer pieces of ring position %d of %d: %.2fM floats owned, %.2fM as replica; "
      "%.1f MB received from other peers in %.0f ms",
      reducer_->rank(), reducer_->peers(), sharded_adam_->owned_floats() / 1e6,
      (replica_adam_ ? replica_adam_->owned_floats() : 0) / 1e6,
      moved.floats_received * 2 * sizeof(float) / 1e6, watch.ElapsedMs());
  return absl::OkStatus();
}

absl::Status Trainer::ShardedUpdate(float lr, float clip_scale) {
  const int64_t t = step_ + 1;
  sharded_adam_->PackGrads(grads_.span(), pending_.owned.span());
  if (replica_adam_) replica_adam_->PackGrads(grads_.span(), pending_.replica.span());
  pending_.step = t;
  pending_.grad_scale = clip_scale;
  // The new parameters of this peer's pieces go where their gradient was; the
  // allgather fills in everybody else's (the replica pieces' too: the owner's bits).
  sharded_adam_->StageParams(params_.span(), pending_.owned.span(), grads_.span(), lr, t,
                             clip_scale);
  RETURN_IF_ERROR(reducer_->AllgatherOwned(grads_.span()));
  // The whole update is here: make it this peer's state.
  sharded_adam_->UpdateMoments(pending_.owned.span(), clip_scale);
  if (replica_adam_) replica_adam_->UpdateMoments(pending_.replica.span(), clip_scale);
  std::memcpy(params_.data(), grads_.data(), params_.bytes());
  pending_.step = -1;
  moments_step_ = t;
  return absl::OkStatus();
}

absl::Status Trainer::GatherMomentsForCheckpoint(bool need) {
  return GatherPiecesForCheckpoint(
      need,
      [this] {
        return BeginShardedTrainCheckpoint(
            config_.ckpt_dir, CheckpointMetaAt(step_, CheckpointEpoch()), params_.span());
      },
      {"adam_m", "adam_v"}, HeldMomentRanges(),
      [this](int buffer, optim::FloatRange r) { return ReadHeldMoments(buffer, r); },
      "the optimizer state");
}

}  // namespace rt::train
