// Test helper: a GradientReducer that forwards every virtual method to a wrapped one,
// the base of test reducers that change one or two behaviours of a real reducer (an
// elastic ring's, a ring's) and leave the rest alone: a test derives from it and
// overrides only what it changes, calling ForwardingReducer's method (or inner()) for
// the rest. Every virtual method of GradientReducer is forwarded here and only here, so
// a method added to the interface needs one edit in tests: this file.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "train/gradient_reducer.h"

namespace rt::train::testing {

class ForwardingReducer : public GradientReducer {
 public:
  explicit ForwardingReducer(std::unique_ptr<GradientReducer> inner) : inner_(std::move(inner)) {}

  int rank() const override { return inner_->rank(); }
  int peers() const override { return inner_->peers(); }
  std::vector<int> member_ids() const override { return inner_->member_ids(); }
  uint64_t epoch() const override { return inner_->epoch(); }
  int leader() const override { return inner_->leader(); }
  absl::Status BeginStep(int64_t step, absl::Span<float> grads) override {
    return inner_->BeginStep(step, grads);
  }
  void OnGradReady(size_t offset) override { inner_->OnGradReady(offset); }
  absl::Status Finish(StepTotals* totals) override { return inner_->Finish(totals); }
  absl::Status CheckParamHash(int64_t step, uint64_t param_hash) override {
    return inner_->CheckParamHash(step, param_hash);
  }
  absl::Status SyncState(int64_t* step, const std::vector<absl::Span<float>>& state) override {
    return inner_->SyncState(step, state);
  }
  int64_t PreconditionFrom() const override { return inner_->PreconditionFrom(); }
  void SetPreconditioner(std::function<void(absl::Span<float>, size_t)> fn) override {
    inner_->SetPreconditioner(std::move(fn));
  }
  std::vector<std::pair<size_t, size_t>> DenseSumRanges() const override {
    return inner_->DenseSumRanges();
  }
  std::vector<std::pair<size_t, size_t>> RefreshedRanges() const override {
    return inner_->RefreshedRanges();
  }
  bool ShardsOptimizer() const override { return inner_->ShardsOptimizer(); }
  std::vector<std::pair<size_t, size_t>> OwnedRanges(size_t length) const override {
    return inner_->OwnedRanges(length);
  }
  std::vector<std::pair<size_t, size_t>> ReplicaRanges(size_t length) const override {
    return inner_->ReplicaRanges(length);
  }
  absl::StatusOr<double> GradSumOfSquares(absl::Span<const float> grads) override {
    return inner_->GradSumOfSquares(grads);
  }
  absl::Status AllgatherOwned(absl::Span<float> params) override {
    return inner_->AllgatherOwned(params);
  }
  absl::StatusOr<collective::PieceExchangeResult> ExchangePieces(
      size_t length, int buffers, const std::vector<collective::FloatRange>& held,
      const std::vector<collective::FloatRange>& needed, const collective::PieceReader& read,
      const collective::PieceWriter& write) override {
    return inner_->ExchangePieces(length, buffers, held, needed, read, write);
  }
  absl::StatusOr<std::vector<int64_t>> AllgatherInt64(int64_t mine) override {
    return inner_->AllgatherInt64(mine);
  }
  absl::StatusOr<std::vector<std::vector<int64_t>>> AllgatherInt64s(
      absl::Span<const int64_t> mine) override {
    return inner_->AllgatherInt64s(mine);
  }
  void StateRewound(int64_t step) override { inner_->StateRewound(step); }
  uint64_t bytes_sent() const override { return inner_->bytes_sent(); }
  std::vector<observe::LinkFigure> ProbedLinks() const override { return inner_->ProbedLinks(); }
  absl::Status AttachState(const TrainStateRef& state, uint64_t loaded_epoch) override {
    return inner_->AttachState(state, loaded_epoch);
  }
  absl::StatusOr<BoundaryAction> AtStepBoundary() override { return inner_->AtStepBoundary(); }
  bool StepAborted() const override { return inner_->StepAborted(); }
  absl::Status StepFailed(const absl::Status& error) override { return inner_->StepFailed(error); }
  void StepCompleted(int64_t step) override { inner_->StepCompleted(step); }
  void CommitExchange() override { inner_->CommitExchange(); }
  void InnerStepCompleted(int64_t step) override { inner_->InnerStepCompleted(step); }
  absl::Status UseRoundSync(std::optional<collective::CodecSpec> outer_codec, bool shard) override {
    return inner_->UseRoundSync(outer_codec, shard);
  }
  bool StopAfterThisStep() const override { return inner_->StopAfterThisStep(); }
  void Abort(const absl::Status& why) override { inner_->Abort(why); }
  bool WritesCheckpoints() const override { return inner_->WritesCheckpoints(); }

 protected:
  GradientReducer& inner() { return *inner_; }
  const GradientReducer& inner() const { return *inner_; }

 private:
  std::unique_ptr<GradientReducer> inner_;
};

}  // namespace rt::train::testing
