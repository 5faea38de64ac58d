// Trainer's checkpoints (trainer.h): resuming from the newest valid one (InitOrResume),
// and writing them: the periodic checkpoints go to a background writer that reads the
// live buffers while the next step computes; the final one is written in place. A
// failed write never stops training, except the final one.
#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "ckpt/checkpoint.h"
#include "core/clock.h"
#include "core/log.h"
#include "core/status_macros.h"
#include "train/train_checkpoint.h"
#include "train/trainer.h"

namespace rt::train {

ckpt::CheckpointMeta Trainer::CheckpointMetaAt(int64_t step, uint64_t epoch) const {
  ckpt::CheckpointMeta meta;
  meta.step = step;
  meta.epoch = epoch;
  meta.fields =
      TrainMetaFields(config_, gpt_->config(), sampler_->slots(), train_data_->fingerprint(),
                      train_data_->eot_id(), train_data_->manifest().license);
  return meta;
}

absl::Status Trainer::WriteCheckpoint(int64_t step, uint64_t epoch) const {
  if (adam_ != nullptr) {
    // The outer momentum from the first round on; a checkpoint of --outer-after's
    // per-step steps (up to the switch at step N) has none, as a per-step run's.
    const bool outer = round_ && (config_.round.after == 0 || step > config_.round.after);
    const sync::RoundSync* round = round_.get();
    if (!outer || !round->sharded()) {
      return SaveTrainCheckpoint(config_.ckpt_dir, CheckpointMetaAt(step, epoch), params_.span(),
                                 adam_->m(), adam_->v(), tokenizer_model_, config_.ckpt_keep,
                                 outer ? round->momentum() : absl::Span<const float>());
    }
    // --outer-shard on: the checkpoint the ring gathered for this step (GatherOuterMomentum).
  }
  std::shared_ptr<ckpt::CheckpointBuilder> b = sharded_ckpt_;
  if (b == nullptr || sharded_ckpt_step_ != step) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "no checkpoint of step %d: with %s this peer holds only its pieces of the %s, and "
        "the ring did not gather them for this step",
        step, adam_ != nullptr ? "--outer-shard on" : "--zero 1",
        adam_ != nullptr ? "outer momentum" : "optimizer state"));
  }
  return FinishTrainCheckpoint(b.get(), tokenizer_model_, config_.ckpt_keep);
}

uint64_t Trainer::CheckpointEpoch() const {
  // A ring's epochs start above the resumed checkpoint's; a peer alone has epoch 0,
  // and must not look like a stale writer beside the ring checkpoint it resumed from.
  return std::max(reducer_->epoch(), loaded_epoch_);
}

absl::Status Trainer::SaveCheckpoint() {
  FinishBackgroundCheckpoint();
  if (config_.ckpt_dir.empty() || last_checkpoint_step_ == step_) return absl::OkStatus();
  if (!reducer_->WritesCheckpoints()) return absl::OkStatus();  // the leader (+ a copy) writes
  Stopwatch watch;
  const absl::Status saved = WriteCheckpoint(step_, CheckpointEpoch());
  RecordCheckpoint(step_, saved, watch.ElapsedMs(), /*background=*/false);
  return saved;
}

void Trainer::RecordCheckpoint(int64_t step, const absl::Status& s, double write_ms,
                               bool background) {
  if (board_ && !absl::IsAlreadyExists(s)) {  // AlreadyExists: another writer was first
    board_->OnCheckpoint(step, CheckpointEpoch(), config_.ckpt_dir,
                         s.ok() ? "" : std::string(s.message()));
  }
  if (!s.ok()) return;
  last_checkpoint_step_ = std::max(last_checkpoint_step_, step);
  good_checkpoint_step_ = std::max(good_checkpoint_step_, step);
  LogInfo("checkpoint step %d (epoch %d) written to %s in %.0f ms%s", step, CheckpointEpoch(),
          config_.ckpt_dir, write_ms, background ? ", beside training" : "");
}

absl::Status Trainer::GatherPiecesForCheckpoint(
    bool need, absl::FunctionRef<absl::StatusOr<std::unique_ptr<ckpt::CheckpointBuilder>>()> begin,
    absl::Span<const char* const> sections, const std::vector<optim::FloatRange>& held,
    const collective::PieceReader& read, const char* what) {
  const size_t n = params_.size();
  // A write in flight may still use sharded_ckpt_ (under --zero 1 the optimizer step
  // already waited for it: nothing to wait for there).
  FinishBackgroundCheckpoint();
  sharded_ckpt_.reset();
  sharded_ckpt_step_ = -1;
  std::unique_ptr<ckpt::CheckpointBuilder> b;
  if (need) {
    absl::StatusOr<std::unique_ptr<ckpt::CheckpointBuilder>> begun = begin();
    if (begun.ok()) {
      b = *std::move(begun);
    } else {
      // Not this time (a full disk, a stale writer): the ring still needs this member's
      // pieces for the other writer, so it takes part needing nothing.
      RecordCheckpoint(step_, begun.status(), 0, /*background=*/false);
      (void)CarryOn(step_, begun.status(), /*final=*/false);
    }
  }
  std::vector<optim::FloatRange> needed;
  if (b != nullptr) needed.push_back({0, n});
  // A write error makes the builder fail for good (sticky): later pieces are no-ops.
  auto write = [&b, sections](int buffer, size_t offset, absl::Span<const float> floats) {
    (void)b->WriteAt(sections[buffer], offset * sizeof(float),
                     absl::Span<const uint8_t>(reinterpret_cast<const uint8_t*>(floats.data()),
                                               floats.size() * sizeof(float)));
  };
  ASSIGN_OR_RETURN(
      collective::PieceExchangeResult moved,
      reducer_->ExchangePieces(n, static_cast<int>(sections.size()), held, needed, read, write));
  if (!moved.lost.empty()) {
    return absl::InternalError(
        absl::StrFormat("step %d: gathering %s for a checkpoint: %d ranges held by no member",
                        step_, what, moved.lost.size()));
  }
  if (b != nullptr) {
    sharded_ckpt_ = std::move(b);
    sharded_ckpt_step_ = step_;
  }
  return absl::OkStatus();
}

void Trainer::StartBackgroundCheckpoint() {
  if (config_.ckpt_dir.empty() || last_checkpoint_step_ == step_) return;
  if (!reducer_->WritesCheckpoints()) return;
  // The writer gets the step and epoch by value; the buffers it reads are written only
  // by the optimizer step and a state replacement, and both wait for it first.
  const int64_t step = step_;
  const uint64_t epoch = CheckpointEpoch();
  std::optional<BackgroundCheckpoint::Result> earlier =
      ckpt_writer_.Start(step, [this, step, epoch] { return WriteCheckpoint(step, epoch); });
  if (earlier) AccountCheckpoint(*earlier);
}

void Trainer::FinishBackgroundCheckpoint() {
  std::optional<BackgroundCheckpoint::Result> r = ckpt_writer_.Wait();
  if (r) AccountCheckpoint(*r);
}

void Trainer::AccountCheckpoint(const BackgroundCheckpoint::Result& r) {
  RecordCheckpoint(r.step, r.status, r.write_ms, /*background=*/true);
  (void)CarryOn(r.step, r.status, /*final=*/false);  // not final: never an error
}

absl::Status Trainer::CheckpointOrCarryOn(bool final) {
  return CarryOn(step_, SaveCheckpoint(), final);
}

absl::Status Trainer::CarryOn(int64_t step, const absl::Status& s, bool final) {
  if (absl::IsAlreadyExists(s)) {
    // Another writer of a shared directory already wrote a later step of this view.
    LogInfo("%s", s.message());
    return absl::OkStatus();
  }
  if (s.ok()) {
    if (ckpt_failures_ > 0 && last_checkpoint_step_ == step) {
      LogInfo("checkpoints work again (step %d written after %d failed attempt(s))", step,
              ckpt_failures_);
    }
    ckpt_failures_ = 0;
    return absl::OkStatus();
  }
  return CheckpointFailed(step, s, final);
}

absl::Status Trainer::CheckpointFailed(int64_t step, const absl::Status& s, bool final) {
  ++ckpt_failures_;
  const std::string newest =
      good_checkpoint_step_ >= 0 ? absl::StrFormat("step %d", good_checkpoint_step_) : "none";
  if (final) {
    return absl::Status(
        s.code(), absl::StrFormat("training stopped at step %d, but its checkpoint could not be "
                                  "written: %s (the newest checkpoint this peer wrote or resumed "
                                  "from in %s: %s)",
                                  step, s.message(), config_.ckpt_dir, newest));
  }
  // A full or failing disk must not kill the run (nor, one after the other, every peer
  // that inherits the duty): the state is still in memory, the next interval retries.
  if (ckpt_failures_ >= kLoudCheckpointFailures) {
    LogError(
        "CHECKPOINTS ARE FAILING: %d checkpoint writes in a row failed; the newest checkpoint "
        "this peer wrote or resumed from in %s: %s. Training goes on, but a crash now loses "
        "every step since. Last error: %s",
        ckpt_failures_, config_.ckpt_dir, newest, s.message());
  } else {
    LogWarning("checkpoint of step %d failed: %s; training goes on, the next checkpoint retries",
               step, s.message());
  }
  return absl::OkStatus();
}

absl::Status Trainer::InitOrResume() {
  if (config_.ckpt_dir.empty()) {
    gpt_->InitParams(params_.span(), config_.seed);
    return absl::OkStatus();
  }
  std::vector<std::string> problems;
  absl::StatusOr<ckpt::Checkpoint> latest =
      ckpt::OpenLatestValidCheckpoint(config_.ckpt_dir, &problems);
  for (const std::string& p : problems) LogWarning("skipping invalid checkpoint: %s", p);
  if (!latest.ok() && !absl::IsNotFound(latest.status())) return latest.status();
  if (!config_.resume) {
    if (latest.ok()) {
      return absl::FailedPreconditionError(absl::StrFormat(
          "--ckpt-dir %s already holds a checkpoint (%s, step %d) and --resume=false was "
          "given: drop it to continue that run, or choose another --ckpt-dir",
          config_.ckpt_dir, latest->path(), latest->meta().step));
    }
    gpt_->InitParams(params_.span(), config_.seed);
    return absl::OkStatus();
  }
  if (!latest.ok()) {
    LogInfo("--resume: no checkpoint in %s yet, starting from step 0", config_.ckpt_dir);
    gpt_->InitParams(params_.span(), config_.seed);
    return absl::OkStatus();
  }

  // Resume: the same model shape and data, then params and both moments.
  ASSIGN_OR_RETURN(model::GptConfig saved, ModelConfigFromMeta(*latest));
  RETURN_IF_ERROR(CheckSameModel(saved, gpt_->config(), latest->path()));
  const auto& fields = latest->meta().fields;
  auto field = [&](const std::string& key) {
    auto it = fields.find(key);
    return it == fields.end() ? std::string() : it->second;
  };
  if (field("data.fingerprint") != train_data_->fingerprint()) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "checkpoint %s was trained on other data (fingerprint %s, --data %s has %s)",
        latest->path(), field("data.fingerprint"), config_.data_dir, train_data_->fingerprint()));
  }
  if (field("train.slots") != absl::StrCat(sampler_->slots())) {
    LogWarning("checkpoint %s used %s sequences per step, this run %d: the data order changes",
               latest->path(), field("train.slots"), sampler_->slots());
  }
  if (field("model.precision") != model::PrecisionName(config_.precision)) {
    LogWarning("checkpoint %s was trained in %s, continuing in %s", latest->path(),
               field("model.precision"), model::PrecisionName(config_.precision));
  }
  // The step counts on under this run's schedule; say so when it is not the one the
  // checkpoint was trained under (a longer --steps stretches the cosine: the rate jumps).
  if (const std::string change = DescribeScheduleChange(fields, config_, latest->meta().step);
      !change.empty()) {
    LogWarning("checkpoint %s was trained under another learning-rate schedule: %s", latest->path(),
               change);
  }
  RETURN_IF_ERROR(ReadFloatSection(*latest, "params", params_.span()));
  if (round_ != nullptr) {
    // The outer momentum of a round-sync checkpoint; a per-step run's checkpoint (or
    // one of another --outer-every) continues with what it has: momentum from zero.
    if (round_->sharded()) {
      // --outer-shard on: this peer's pieces are read when the ring is known
      // (SettleOuterPieces); the section's size is checked now.
      if (latest->HasSection("outer_momentum") &&
          latest->SectionBytes("outer_momentum") != params_.bytes()) {
        return absl::DataLossError(
            absl::StrFormat("%s: section outer_momentum has %d bytes, expected %d", latest->path(),
                            latest->SectionBytes("outer_momentum"), params_.bytes()));
      }
      resumed_checkpoint_ = *latest;
    } else if (latest->HasSection("outer_momentum")) {
      RETURN_IF_ERROR(ReadFloatSection(*latest, "outer_momentum", round_->momentum()));
    } else if (latest->meta().step > config_.round.after) {
      LogInfo("checkpoint %s has no outer momentum: round sync starts it from zero",
              latest->path());
    }
  }
  if (adam_ != nullptr) {
    RETURN_IF_ERROR(ReadFloatSection(*latest, "adam_m", adam_->m()));
    RETURN_IF_ERROR(ReadFloatSection(*latest, "adam_v", adam_->v()));
  } else {
    // --zero 1: this peer's pieces of the moments are read when the ring is known.
    for (const char* name : {"adam_m", "adam_v"}) {
      if (latest->SectionBytes(name) != params_.bytes()) {
        return absl::DataLossError(absl::StrFormat("%s: section %s has %d bytes, expected %d",
                                                   latest->path(), name, latest->SectionBytes(name),
                                                   params_.bytes()));
      }
    }
    resumed_checkpoint_ = *latest;
  }
  step_ = latest->meta().step;
  loaded_epoch_ = latest->meta().epoch;
  tokens_seen_ = step_ * static_cast<int64_t>(sampler_->slots()) * gpt_->config().seq_len;
  last_checkpoint_step_ = step_;
  good_checkpoint_step_ = step_;
  resumed_ = true;
  LogInfo("resumed from %s at step %d (epoch %d)", latest->path(), step_, loaded_epoch_);
  return absl::OkStatus();
}

}  // namespace rt::train
