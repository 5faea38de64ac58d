// RingGradientReducer under ZeRO-1 (--zero 1, RingReducerOptions::shard_optimizer):
// the pieces each ring position owns, the forwarding of owned gradient sums to the
// replica holder, the gradient norm from every owner's piece sums, the allgather of the
// updated parameters (with its test fault), and the small collectives the trainer uses
// to move optimizer state between rings.
#include <signal.h>

#include <cstring>

#include "absl/strings/str_format.h"
#include "collective/small_collectives.h"
#include "core/log.h"
#include "core/status_macros.h"
#include "net/ring_sends.h"
#include "optim/grad_clip.h"
#include "train/ring_error_context.h"
#include "train/ring_gradient_reducer.h"
#include "train/zero_pieces.h"

namespace rt::train {

std::vector<std::pair<size_t, size_t>> RingGradientReducer::OwnedRanges(size_t length) const {
  if (!sharded()) return {{0, length}};
  return OwnedPieces(length, options_.buckets.bucket_bytes, peers(), rank());
}

std::vector<std::pair<size_t, size_t>> RingGradientReducer::ReplicaRanges(size_t length) const {
  if (!sharded()) return {};
  return ReplicaPieces(length, options_.buckets.bucket_bytes, peers(), rank());
}

absl::Status RingGradientReducer::ForwardOwnedSums(absl::Span<float> grads) {
  auto bytes = [&grads](const std::pair<size_t, size_t>& r) {
    return absl::Span<uint8_t>(reinterpret_cast<uint8_t*>(grads.data() + r.first),
                               (r.second - r.first) * sizeof(float));
  };
  absl::Status st;
  for (const auto& r : OwnedRanges(grads.size())) {
    st = ring_->SendToNext(bytes(r));
    if (!st.ok()) break;
    counted_bytes_ += (r.second - r.first) * sizeof(float);
  }
  std::vector<uint8_t> scratch;
  for (const auto& r : ReplicaRanges(grads.size())) {
    if (!st.ok()) break;
    st = ring_->RecvFromPrevInto(bytes(r), &scratch, options_.timeout);
  }
  // The queued sends read `grads` in place (SendToNext does not copy), and a failed step
  // is redone into the same buffer: wait for them on every path, not only on success.
  if (!st.ok()) {
    net::DrainSendsAfterError(ring_.get(), options_.timeout);
    return st;
  }
  return ring_->WaitSendsDone(options_.timeout);
}

absl::StatusOr<double> RingGradientReducer::GradSumOfSquares(absl::Span<const float> grads) {
  // Alone, both modes hold the whole sum: the single peer's order (LocalGradientReducer).
  if (peers() == 1) return optim::SumOfSquares(grads);
  const std::vector<ZeroPiece> pieces =
      ZeroPieces(grads.size(), options_.buckets.bucket_bytes, peers());
  std::vector<double> sums(pieces.size(), 0.0);
  if (!sharded()) {
    for (size_t i = 0; i < pieces.size(); ++i) {
      sums[i] =
          optim::SumOfSquares(grads.subspan(pieces[i].begin, pieces[i].end - pieces[i].begin));
    }
  } else {
    // This peer's piece sums, in buffer order; every peer's arrive in ring position order.
    std::vector<double> mine;
    for (const ZeroPiece& p : pieces) {
      if (p.owner == rank()) {
        mine.push_back(optim::SumOfSquares(grads.subspan(p.begin, p.end - p.begin)));
      }
    }
    std::vector<uint8_t> bytes(mine.size() * sizeof(double));
    if (!bytes.empty()) std::memcpy(bytes.data(), mine.data(), bytes.size());
    absl::StatusOr<std::vector<std::vector<uint8_t>>> all =
        collective::AllgatherBytes(ring_.get(), bytes, options_.timeout);
    RETURN_IF_ERROR(WithContext(all.status(),
                                absl::StrFormat("step %d: summing the gradient norm", step_ + 1)));
    counted_bytes_ += bytes.size() * static_cast<uint64_t>(peers() - 1);
    std::vector<size_t> next(static_cast<size_t>(peers()), 0);  // per owner: its next sum
    for (size_t i = 0; i < pieces.size(); ++i) {
      const std::vector<uint8_t>& from = (*all)[static_cast<size_t>(pieces[i].owner)];
      const size_t k = next[static_cast<size_t>(pieces[i].owner)]++;
      if ((k + 1) * sizeof(double) > from.size()) {
        return absl::DataLossError(absl::StrFormat(
            "step %d: peer at ring position %d sent %d bytes of gradient norm pieces, fewer "
            "than its pieces need (peers disagree on the bucket cut)",
            step_ + 1, pieces[i].owner, from.size()));
      }
      std::memcpy(&sums[i], from.data() + k * sizeof(double), sizeof(double));
    }
  }
  double total = 0;
  for (double v : sums) total += v;
  return total;
}

absl::Status RingGradientReducer::AllgatherOwned(absl::Span<float> params) {
  if (!sharded() || peers() == 1) return absl::OkStatus();
  // The test fault: this process's Nth allgather (counted across views) freezes it.
  const AllgatherStop& fault = options_.test_stop_in_allgather;
  const bool freeze = fault.at > 0 && ++carried_->param_allgathers == fault.at;
  const auto stop_here = [this](const char* where) {
    LogWarning(
        "test fault (RINGTRAIN_TEST_STOP_IN_ALLGATHER): freezing this process (SIGSTOP) %s of "
        "the parameter allgather of step %d",
        where, step_ + 1);
    raise(SIGSTOP);
  };
  if (freeze && !fault.after_own_segment) stop_here("at the start");
  collective::AllreduceOptions o = options_.buckets.allreduce;
  o.wire = collective::WireFormat::kFp32;
  o.phases = collective::RingPhases::kAllgather;
  const std::vector<collective::BucketedReducer::Bucket> cut =
      collective::BucketedReducer::Cut(params.size(), options_.buckets.bucket_bytes);
  for (size_t i = 0; i < cut.size(); ++i) {
    const collective::BucketedReducer::Bucket& b = cut[i];
    if (freeze && fault.after_own_segment && i + 1 == cut.size()) {
      o.after_own_segment = [&stop_here] {
        stop_here("after sending its own segment of the last bucket");
      };
    }
    collective::RingAllreduce op(ring_.get(), params.subspan(b.begin, b.end - b.begin), o);
    RETURN_IF_ERROR(WithContext(op.run(), absl::StrFormat("step %d: allgather of the updated "
                                                          "parameters",
                                                          step_ + 1)));
    counted_bytes_ += op.bytes_sent();
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<int64_t>> RingGradientReducer::AllgatherInt64(int64_t mine) {
  ASSIGN_OR_RETURN(const std::vector<std::vector<int64_t>> all,
                   AllgatherInt64s(absl::MakeConstSpan(&mine, 1)));
  std::vector<int64_t> out;
  for (const std::vector<int64_t>& v : all) out.push_back(v[0]);
  return out;
}

absl::StatusOr<std::vector<std::vector<int64_t>>> RingGradientReducer::AllgatherInt64s(
    absl::Span<const int64_t> mine) {
  if (in_step_) {
    return absl::FailedPreconditionError("AllgatherInt64 called inside a step (BeginStep..Finish)");
  }
  RETURN_IF_ERROR(abort_->status());
  std::vector<uint8_t> bytes(mine.size() * sizeof(int64_t));
  if (!mine.empty()) std::memcpy(bytes.data(), mine.data(), bytes.size());
  absl::StatusOr<std::vector<std::vector<uint8_t>>> all =
      collective::AllgatherBytes(ring_.get(), bytes, options_.timeout);
  RETURN_IF_ERROR(all.status());
  counted_bytes_ += bytes.size() * static_cast<uint64_t>(peers() - 1);
  std::vector<std::vector<int64_t>> out;
  for (size_t p = 0; p < all->size(); ++p) {
    if ((*all)[p].size() != bytes.size()) {
      return absl::DataLossError(
          absl::StrFormat("ring position %d sent %d bytes for %d 64-bit "
                          "values",
                          p, (*all)[p].size(), mine.size()));
    }
    std::vector<int64_t> v(mine.size());
    if (!v.empty()) std::memcpy(v.data(), (*all)[p].data(), bytes.size());
    out.push_back(std::move(v));
  }
  return out;
}

absl::StatusOr<collective::PieceExchangeResult> RingGradientReducer::ExchangePieces(
    size_t length, int buffers, const std::vector<collective::FloatRange>& held,
    const std::vector<collective::FloatRange>& needed, const collective::PieceReader& read,
    const collective::PieceWriter& write) {
  if (in_step_) {
    return absl::FailedPreconditionError("ExchangePieces called inside a step (BeginStep..Finish)");
  }
  RETURN_IF_ERROR(abort_->status());
  collective::PieceExchangeOptions o;
  o.timeout = options_.timeout;
  absl::StatusOr<collective::PieceExchangeResult> r =
      collective::ExchangePieces(ring_.get(), length, buffers, held, needed, read, write, o);
  RETURN_IF_ERROR(WithContext(r.status(), "moving optimizer state between peers"));
  counted_bytes_ += r->bytes_sent;
  return r;
}
}  // namespace rt::train
