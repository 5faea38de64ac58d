// Ring allreduce: the algorithm (run()) and its chunk-level steps.
#include "collective/ring_allreduce.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_format.h"
#include "collective/bf16_feedback.h"
#include "collective/small_collectives.h"
#include "core/status_macros.h"

namespace rt::collective {

RingAllreduce::RingAllreduce(net::RingTransport* ring, absl::Span<float> data,
                             const AllreduceOptions& options, absl::Span<float> residual)
    : ring_(ring),
      data_(data),
      residual_(residual),
      options_(options),
      rank_(ring->rank()),
      size_(ring->size()) {
  size_t longest_segment = (data_.size() + size_ - 1) / size_;
  size_t chunk_elements = std::max<size_t>(1, options_.chunk_bytes / ElementBytes());
  chunks_per_segment_ =
      std::max<size_t>(1, (longest_segment + chunk_elements - 1) / chunk_elements);
  if (options_.wire == WireFormat::kBf16 && size_ > 1) staging_.resize(data_.size());
}

absl::Status RingAllreduce::run() {
  if (options_.wire == WireFormat::kBf16 && !residual_.empty() &&
      residual_.size() != data_.size()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "allreduce: residual has %d floats, data has %d", residual_.size(), data_.size()));
  }
  if (size_ == 1) {  // alone: the sum is our contribution, nothing is rounded
    std::fill(residual_.begin(), residual_.end(), 0.0f);
    return absl::OkStatus();
  }
  const size_t chunks = chunks_per_segment_;

  // Reduce-scatter, step 0: our own contribution to the segment we own.
  for (size_t c = 0; c < chunks; ++c) {
    Range ch = Chunk(rank_, c);
    EncodeOwnChunk(ch);
    RETURN_IF_ERROR(SendChunk(ch));
  }
  // Step k: the partial sum of segment rank-k-1 arrives (its owner's and the next k
  // peers' contributions, in ring order); we add ours and pass it on. At the last
  // step (k = N-2) the sum of segment rank+1 is complete: passing it on is the first
  // step of the allgather.
  for (int k = 0; k < size_ - 1; ++k) {
    const int segment = Mod(rank_ - k - 1);
    for (size_t c = 0; c < chunks; ++c) {
      Range ch = Chunk(segment, c);
      RETURN_IF_ERROR(RecvChunk(ch));
      ReduceChunk(ch);
      RETURN_IF_ERROR(SendChunk(ch));
    }
  }
  // No WaitSendsDone here: waiting for all sends while every peer waits too, with
  // the successor not receiving, deadlocks once a segment has more chunks than the
  // links can buffer. Overwriting in the allgather is safe without it: the final
  // sum of chunk c of segment s includes our contribution, which reached the
  // successor in the very reduce-scatter message we sent from that region. So by
  // the time the first byte of that final chunk arrives here (it is received
  // straight into place), the successor has taken our earlier message whole and
  // the transport no longer reads those bytes.

  // Allgather, step k: the final sum of segment rank-k arrives; we keep it and pass
  // it on, except at the last step: our successor computed that segment itself.
  for (int k = 0; k < size_ - 1; ++k) {
    const int segment = Mod(rank_ - k);
    for (size_t c = 0; c < chunks; ++c) {
      Range ch = Chunk(segment, c);
      RETURN_IF_ERROR(RecvFinalChunk(ch));
      if (k < size_ - 2) RETURN_IF_ERROR(SendChunk(ch));
    }
  }
  RETURN_IF_ERROR(ring_->WaitSendsDone(options_.timeout));
  Finalize();
  return absl::OkStatus();
}

RingAllreduce::Range RingAllreduce::Chunk(int segment, size_t chunk) const {
  // Balanced splits: segment lengths differ by at most one element, and so do the
  // chunks of a segment. Every peer computes the same ranges from (length, N).
  const size_t n = data_.size();
  const size_t seg_begin = n * segment / size_;
  const size_t seg_len = n * (segment + 1) / size_ - seg_begin;
  return Range{seg_begin + seg_len * chunk / chunks_per_segment_,
               seg_begin + seg_len * (chunk + 1) / chunks_per_segment_};
}

absl::Status RingAllreduce::SendChunk(Range r) {
  if (r.size() == 0) return absl::OkStatus();  // both ends skip empty chunks
  const uint8_t* bytes = options_.wire == WireFormat::kFp32
                             ? reinterpret_cast<const uint8_t*>(data_.data() + r.begin)
                             : reinterpret_cast<const uint8_t*>(staging_.data() + r.begin);
  const size_t length = r.size() * ElementBytes();
  bytes_sent_ += length;
  return ring_->SendToNext(absl::MakeConstSpan(bytes, length));
}

absl::Status RingAllreduce::RecvChunk(Range r) {
  if (r.size() == 0) return absl::OkStatus();
  RETURN_IF_ERROR(ring_->RecvFromPrev(&inbox_, options_.timeout));
  const size_t expected = r.size() * ElementBytes();
  if (inbox_.size() != expected) {
    return absl::DataLossError(absl::StrFormat(
        "allreduce: peer %d expected a %d-byte chunk from peer %d, got %d bytes (peers disagree "
        "on the buffer length or the collective)",
        rank_, expected, Mod(rank_ - 1), inbox_.size()));
  }
  return absl::OkStatus();
}

void RingAllreduce::EncodeOwnChunk(Range r) {
  if (options_.wire == WireFormat::kFp32) return;  // fp32 chunks are sent from data_
  RoundToBf16WithFeedback(data_.data() + r.begin, staging_.data() + r.begin,
                          residual_.empty() ? nullptr : residual_.data() + r.begin, r.size());
}

void RingAllreduce::ReduceChunk(Range r) {
  const size_t n = r.size();
  if (n == 0) return;
  if (options_.wire == WireFormat::kFp32) {
    float* local = data_.data() + r.begin;
    const uint8_t* in = inbox_.data();
    for (size_t i = 0; i < n; ++i) {
      float incoming;
      std::memcpy(&incoming, in + 4 * i, 4);
      local[i] = incoming + local[i];
    }
    return;
  }
  // The partial sum rounded to bf16 is what travels on; its rounding error stays here.
  incoming_.resize(n);
  std::memcpy(incoming_.data(), inbox_.data(), 2 * n);
  AddAndRoundToBf16(incoming_.data(), data_.data() + r.begin, staging_.data() + r.begin,
                    residual_.empty() ? nullptr : residual_.data() + r.begin, n);
}

absl::Status RingAllreduce::RecvFinalChunk(Range r) {
  if (r.size() == 0) return absl::OkStatus();
  uint8_t* dst = options_.wire == WireFormat::kFp32
                     ? reinterpret_cast<uint8_t*>(data_.data() + r.begin)
                     : reinterpret_cast<uint8_t*>(staging_.data() + r.begin);
  absl::Status st = ring_->RecvFromPrevInto(absl::MakeSpan(dst, r.size() * ElementBytes()), &inbox_,
                                            options_.timeout);
  if (st.ok() || st.code() != absl::StatusCode::kDataLoss) return st;
  return absl::Status(st.code(), absl::StrFormat("allreduce: peer %d, final chunk from peer %d: %s",
                                                 rank_, Mod(rank_ - 1), st.message()));
}

void RingAllreduce::Finalize() {
  if (options_.wire == WireFormat::kFp32) return;
  for (size_t i = 0; i < data_.size(); ++i) data_[i] = Bf16ToFloat(staging_[i]);
}

absl::Status AllreduceSum(net::RingTransport* ring, absl::Span<float> data,
                          const AllreduceOptions& options) {
  AllreduceOptions fp32 = options;
  fp32.wire = WireFormat::kFp32;
  return RingAllreduce(ring, data, fp32).run();
}

void ScaleByInverse(absl::Span<float> data, double divisor) {
  const float inverse = static_cast<float>(1.0 / divisor);
  for (float& x : data) x *= inverse;
}

absl::Status AllreduceTokenAverage(net::RingTransport* ring, absl::Span<float> grads,
                                   uint64_t local_tokens, const AllreduceOptions& options,
                                   uint64_t* total_tokens) {
  uint64_t total = local_tokens;
  RETURN_IF_ERROR(AllreduceSumU64(ring, absl::MakeSpan(&total, 1), options.timeout));
  RETURN_IF_ERROR(AllreduceSum(ring, grads, options));
  if (total > 0) ScaleByInverse(grads, static_cast<double>(total));
  if (total_tokens != nullptr) *total_tokens = total;
  return absl::OkStatus();
}

}  // namespace rt::collective
