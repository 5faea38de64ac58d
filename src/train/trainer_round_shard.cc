// Trainer under round sync with the outer state sharded (--outer-shard on;
// sync/round_sync.h "Sharded outer state"): the round-start copy and the outer momentum
// live on the pieces ZeRO-1 cuts (train/zero_pieces.h: per bucket, each ring position
// owns one segment and keeps its predecessor's as a replica), and they move with the
// same machinery (GradientReducer::ExchangePieces) when the ring changes or a writer
// needs the whole momentum for a checkpoint.
//
// Holdings, as in trainer_zero.cc. A member holds its pieces' values when they belong to
// the current outer step count (outer_held_); at a round's start, where every member's
// parameters are the shared ones (start == params), a member also holds everything when
// the momentum is zero everywhere (step 0, the switch of --outer-after) or when it
// resumed from a checkpoint of this very step (momentum read from its file on demand).
// Mid-round only the pieces exist: with one copy per owner and one per successor, any
// single lost peer loses nothing.
//
// Why the step is staged. Its allgather can break half-way, when some peers already hold
// the new parameters and others do not; the membership then resumes from the newest
// state a peer completed (cluster/step_agreement.h). A peer that did not complete it
// still holds start and momentum as before the step; if the ring resumes after the
// step, it received the new parameters (= the new start) and completes its momentum
// with the staged one; if before, the staged momentum is dropped and the step redone.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "absl/strings/str_format.h"
#include "core/clock.h"
#include "core/log.h"
#include "core/status_macros.h"
#include "train/train_checkpoint.h"
#include "train/trainer.h"

namespace rt::train {
namespace {

std::vector<sync::FloatRange> Merged(std::vector<sync::FloatRange> a,
                                     const std::vector<sync::FloatRange>& b) {
  a.insert(a.end(), b.begin(), b.end());
  std::sort(a.begin(), a.end());
  return a;
}

size_t Floats(const std::vector<sync::FloatRange>& ranges) {
  size_t n = 0;
  for (const sync::FloatRange& r : ranges) n += r.second - r.first;
  return n;
}

}  // namespace

bool Trainer::ShardedOuterCheckpoint() const {
  return round_ != nullptr && round_->sharded() && round_mode_ &&
         (config_.round.after == 0 || step_ > config_.round.after);
}

absl::Status Trainer::SettleOuterPieces() {
  const size_t n = params_.size();
  const int64_t now = OuterStepsAt(step_);
  // Where a round begins: a multiple of H, --outer-after's switch, or where this process
  // began (a resume or the ring's state at a step that is neither: the round then runs
  // from there to the next multiple of H, as without sharding).
  const bool at_round_start = step_ % config_.round.every == 0 || step_ == config_.round.after ||
                              (step_ == began_at_ && !round_->sitting_out());
  // 1. An outer step this peer staged but whose parameters did not all arrive: the ring
  //    resumed after it (this peer received its parameters) or before it (redone).
  if (outer_staged_at_ >= 0) {
    if (outer_staged_at_ == now && outer_held_ == now - 1 && at_round_start) {
      round_->CommitOuterStep(&outer_staged_, params_.span());
      outer_held_ = now;
      outer_zero_ = false;
      LogInfo(
          "step %d: the outer step was completed by other peers after the ring broke; its "
          "momentum is applied to this peer's pieces too",
          step_);
    }
    outer_staged_at_ = -1;
    outer_staged_ = AlignedBuffer<float>();
  }
  // 2. This ring's pieces.
  const std::vector<sync::FloatRange> needed =
      Merged(reducer_->OwnedRanges(n), reducer_->ReplicaRanges(n));
  if (outer_held_ == now && outer_epoch_ == reducer_->epoch() && round_->pieces() == needed) {
    return absl::OkStatus();
  }
  Stopwatch watch;
  std::vector<sync::FloatRange> held;
  enum class Source { kNone, kPieces, kZero, kCheckpoint } source = Source::kNone;
  if (outer_held_ == now && !round_->pieces().empty()) {
    held = round_->pieces();
    source = Source::kPieces;
  } else if (at_round_start && outer_zero_) {
    held = {{0, n}};
    source = Source::kZero;
  } else if (at_round_start && resumed_checkpoint_ && resumed_checkpoint_->meta().step == step_) {
    held = {{0, n}};
    source = Source::kCheckpoint;
  }
  AlignedBuffer<float> next_start(Floats(needed)), next_momentum(Floats(needed));
  std::vector<float> scratch;
  auto read = [&](int b, sync::FloatRange r) -> absl::Span<const float> {
    const size_t len = r.second - r.first;
    if (source == Source::kPieces) {
      const int64_t at = sync::PackedOffset(round_->pieces(), r.first);
      const absl::Span<float> from = b == 0 ? round_->start() : round_->momentum();
      return absl::Span<const float>(from).subspan(static_cast<size_t>(at), len);
    }
    // At a round's start the round-start copy is the parameters.
    if (b == 0) return params_.span().subspan(r.first, len);
    if (source == Source::kCheckpoint && resumed_checkpoint_->HasSection("outer_momentum")) {
      return ReadFromCheckpoint(*resumed_checkpoint_, "outer_momentum", r, &scratch);
    }
    scratch.assign(len, 0.0f);  // zero momentum (or a checkpoint of per-step sync)
    return scratch;
  };
  auto write = [&](int b, size_t offset, absl::Span<const float> floats) {
    const int64_t at = sync::PackedOffset(needed, offset);
    float* to = (b == 0 ? next_start : next_momentum).data() + at;
    std::memcpy(to, floats.data(), floats.size() * sizeof(float));
  };
  ASSIGN_OR_RETURN(collective::PieceExchangeResult moved,
                   reducer_->ExchangePieces(n, 2, held, needed, read, write));
  if (!moved.lost.empty()) {
    size_t lost = 0;
    for (const auto& r : moved.lost) lost += r.second - r.first;
    return absl::InternalError(absl::StrFormat(
        "step %d: the sharded outer state (--outer-shard on) of %d floats (%.1f%%) is lost: its "
        "owner and its replica holder, ring neighbours, left together. Restart the peers with "
        "--resume from the newest checkpoint",
        step_ + 1, lost, 100.0 * lost / n));
  }
  round_->SetPieces(needed, std::move(next_start), std::move(next_momentum));
  outer_held_ = now;
  outer_epoch_ = reducer_->epoch();
  // Read once: later rings take the pieces from their members.
  if (source == Source::kCheckpoint) resumed_checkpoint_.reset();
  LogInfo(
      "outer state pieces of ring position %d of %d: %.2fM floats (round-start copy and "
      "momentum each); %.1f MB received from other peers in %.0f ms",
      reducer_->rank(), reducer_->peers(), round_->held_floats() / 1e6,
      moved.floats_received * 2 * sizeof(float) / 1e6, watch.ElapsedMs());
  return absl::OkStatus();
}

absl::StatusOr<sync::OuterStepFigures> Trainer::ShardedOuterStep(bool keep_start) {
  const size_t n = params_.size();
  const int64_t completes = OuterStepsAt(step_ + 1);
  // Alone nothing can break half-way: the momentum is updated in place (each value is
  // read before it is written), with no staging copy.
  const bool alone = reducer_->peers() == 1;
  if (!alone) {
    outer_staged_.Resize(round_->held_floats());
    outer_staged_at_ = completes;
  }
  // keep_start (no peer trained in the round): the new parameters are the round-start
  // copy's pieces, the momentum stays; staged and gathered like a step.
  double mine = 0;
  if (keep_start) {
    round_->StageNoOuterStep(grads_.span(), alone ? round_->momentum() : outer_staged_.span());
  } else {
    mine = round_->StageOuterStep(grads_.span(), alone ? round_->momentum() : outer_staged_.span(),
                                  reducer_->OwnedRanges(n));
  }
  // The norm: every owner's part, added in ring position order (the same on every peer).
  int64_t bits = 0;
  std::memcpy(&bits, &mine, sizeof(bits));
  ASSIGN_OR_RETURN(const std::vector<int64_t> parts, reducer_->AllgatherInt64(bits));
  double norm_sq = 0;
  for (int64_t p : parts) {
    double v = 0;
    std::memcpy(&v, &p, sizeof(v));
    norm_sq += v;
  }
  RETURN_IF_ERROR(reducer_->AllgatherOwned(grads_.span()));
  // The whole update is here: make it this peer's state.
  std::memcpy(params_.data(), grads_.data(), params_.bytes());
  round_->CommitOuterStep(alone ? nullptr : &outer_staged_, params_.span());
  outer_staged_ = AlignedBuffer<float>();  // the old momentum, swapped out (freed)
  outer_staged_at_ = -1;
  outer_held_ = completes;
  outer_zero_ = false;
  sync::OuterStepFigures f;
  f.pseudo_grad_norm = std::sqrt(norm_sq);
  return f;
}

absl::Status Trainer::GatherOuterMomentum(bool need) {
  // As GatherMomentsForCheckpoint (trainer_zero.cc): a writer's checkpoint is begun with
  // the parameters and the AdamW moments (written by its Commit, beside the next step),
  // and the momentum's pieces are written into its file as they arrive.
  const std::vector<sync::FloatRange> held =
      outer_held_ == OuterStepsAt(step_) ? round_->pieces() : std::vector<sync::FloatRange>{};
  return GatherPiecesForCheckpoint(
      need,
      [this] {
        return BeginOuterShardedTrainCheckpoint(config_.ckpt_dir,
                                                CheckpointMetaAt(step_, CheckpointEpoch()),
                                                params_.span(), adam_->m(), adam_->v());
      },
      {"outer_momentum"}, held,
      [this](int, sync::FloatRange r) -> absl::Span<const float> {
        const int64_t at = sync::PackedOffset(round_->pieces(), r.first);
        return absl::Span<const float>(round_->momentum())
            .subspan(static_cast<size_t>(at), r.second - r.first);
      },
      "the outer momentum");
}

}  // namespace rt::train
