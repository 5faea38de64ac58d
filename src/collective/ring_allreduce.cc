// Ring allreduce: the algorithm (run()) and its chunk-level steps.
#include "collective/ring_allreduce.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/strings/str_format.h"
#include "collective/bf16_feedback.h"
#include "collective/small_collectives.h"
#include "core/crc32c.h"
#include "core/status_macros.h"
#include "net/ring_sends.h"

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
  if (options_.phases == RingPhases::kAllgather && options_.wire != WireFormat::kFp32) {
    return absl::InvalidArgumentError("allgather: fp32 wire only (it carries parameters)");
  }
  if (size_ == 1) {  // alone: the sum is our contribution, nothing is rounded
    std::fill(residual_.begin(), residual_.end(), 0.0f);
    return absl::OkStatus();
  }
  absl::Status status =
      options_.phases == RingPhases::kAllgather ? ExchangeAllgather() : Exchange();
  if (!status.ok()) {
    // Stopped on an error: the transport must stop writing into our buffers, and
    // sends still queued get a moment to leave (a broken link closes at once), so
    // the caller can reuse the buffers.
    ring_->CancelRecvsInto();
    net::DrainSendsAfterError(ring_, options_.timeout);
  }
  return status;
}

absl::Status RingAllreduce::Exchange() {
  const size_t chunks = chunks_per_segment_;
  const bool scatter_only = options_.phases == RingPhases::kReduceScatter;
  if (!scatter_only) RETURN_IF_ERROR(PostFinalChunks());

  // Reduce-scatter, step 0: our own contribution to the segment we own. Chunk c is
  // checksummed (and, bf16, encoded) only kOwnLookahead chunks ahead of the chunk we
  // receive, so the transport copies it to the kernel while it is still in cache
  // instead of reading the whole segment from memory twice.
  size_t own_sent = 0;
  auto send_own_until = [&](size_t end) -> absl::Status {
    for (; own_sent < std::min(end, chunks); ++own_sent) {
      Range ch = Chunk(rank_, own_sent);
      EncodeOwnChunk(ch);
      RETURN_IF_ERROR(SendChunk(ch));
    }
    return absl::OkStatus();
  };
  RETURN_IF_ERROR(send_own_until(kOwnLookahead));
  // Step k: the partial sum of segment rank-k-1 arrives (its owner's and the next k
  // peers' contributions, in ring order); we add ours and pass it on. At the last
  // step (k = N-2) the sum of segment rank+1 is complete: passing it on is the first
  // step of the allgather. Messages leave in the order of the algorithm above (all
  // our own chunks first), so sums ready before that wait in `held`.
  std::vector<std::pair<Range, uint32_t>> held;
  for (int k = 0; k < size_ - 1; ++k) {
    const int segment = Mod(rank_ - k - 1);
    for (size_t c = 0; c < chunks; ++c) {
      RETURN_IF_ERROR(send_own_until(c + 1 + kOwnLookahead));
      Range ch = Chunk(segment, c);
      RETURN_IF_ERROR(RecvChunk(ch));
      const uint32_t crc = ReduceChunk(ch);
      // The complete sum of our owned segment stays here when only scattering.
      if (!(scatter_only && k == size_ - 2)) held.emplace_back(ch, crc);
      if (own_sent < chunks) continue;
      for (const auto& [range, crc] : held) RETURN_IF_ERROR(SendChunk(range, crc));
      held.clear();
    }
  }
  // (`held` is empty here: step 0 sent our last own chunk before its last receive.)
  // No WaitSendsDone here: waiting for all sends while every peer waits too, with
  // the successor not receiving, deadlocks once a segment has more chunks than the
  // links can buffer. Overwriting in the allgather is safe without it (see
  // PostFinalChunks).

  if (scatter_only) {
    RETURN_IF_ERROR(ring_->WaitSendsDone(options_.timeout));
    if (options_.wire == WireFormat::kBf16) {  // what the allgather would have delivered
      const auto [begin, end] = OwnedRange(data_.size(), size_, rank_);
      for (size_t i = begin; i < end; ++i) data_[i] = Bf16ToFloat(staging_[i]);
    }
    return absl::OkStatus();
  }

  // Allgather, step k: the final sum of segment rank-k arrives; we keep it and pass
  // it on, except at the last step: our successor computed that segment itself, so
  // its chunks are received all at once (one wake-up, not one per chunk).
  for (int k = 0; k < size_ - 2; ++k) {
    const int segment = Mod(rank_ - k);
    for (size_t c = 0; c < chunks; ++c) {
      Range ch = Chunk(segment, c);
      RETURN_IF_ERROR(RecvFinalChunk(ch));
      RETURN_IF_ERROR(SendChunk(ch));
    }
  }
  RETURN_IF_ERROR(RecvLastFinalChunks(Mod(rank_ - (size_ - 2))));
  RETURN_IF_ERROR(ring_->WaitSendsDone(options_.timeout));
  Finalize();
  return absl::OkStatus();
}

absl::Status RingAllreduce::ExchangeAllgather() {
  // The allreduce's allgather, started by every peer from its owned segment (rank+1)
  // instead of from the last reduce-scatter message: the same messages in the same
  // order. Every other segment is received in place (posted before anything is sent:
  // we never write those ranges, so an early arrival is safe).
  std::vector<absl::Span<uint8_t>> finals;
  for (int k = 0; k < size_ - 1; ++k) {
    for (size_t c = 0; c < chunks_per_segment_; ++c) {
      Range r = Chunk(Mod(rank_ - k), c);
      if (r.size() > 0) finals.push_back(WireBytes(r));
    }
  }
#if !defined(__SANITIZE_THREAD__)  // see PostFinalChunks
  RETURN_IF_ERROR(ring_->PostRecvsInto(0, finals));
#endif
  for (size_t c = 0; c < chunks_per_segment_; ++c) {
    RETURN_IF_ERROR(SendChunk(Chunk(Mod(rank_ + 1), c)));
  }
  if (options_.after_own_segment) {
    RETURN_IF_ERROR(ring_->WaitSendsDone(options_.timeout));
    options_.after_own_segment();
  }
  for (int k = 0; k < size_ - 2; ++k) {
    const int segment = Mod(rank_ - k);
    for (size_t c = 0; c < chunks_per_segment_; ++c) {
      Range ch = Chunk(segment, c);
      RETURN_IF_ERROR(RecvFinalChunk(ch));
      RETURN_IF_ERROR(SendChunk(ch));
    }
  }
  RETURN_IF_ERROR(RecvLastFinalChunks(Mod(rank_ - (size_ - 2))));
  return ring_->WaitSendsDone(options_.timeout);
}

absl::Status RingAllreduce::PostFinalChunks() {
  // The transport may read every allgather message straight into its place as soon
  // as it arrives, even during the reduce-scatter. That is safe: the final sum of
  // chunk c of segment s includes our contribution, which left in the one
  // reduce-scatter message we sent from that region, after which we no longer touch
  // it. So by the time the first byte of that final chunk arrives here, the
  // successor has taken our earlier message whole and neither we nor the transport
  // read or write those bytes any more.
#if defined(__SANITIZE_THREAD__)
  // ThreadSanitizer cannot see that order: it travels through the peer's socket, so
  // an early in-place read looks like a race with our send. Under TSan the
  // transport reads a final chunk in place only while we wait for it (after our
  // sends of that region went through the same link's lock); the in-process
  // transport, which writes posted destinations at send time with the ordering
  // visible to TSan, is what checks the claim above.
  return absl::OkStatus();
#endif
  size_t reduce_scatter_messages = 0;
  std::vector<absl::Span<uint8_t>> finals;
  for (int k = 0; k < size_ - 1; ++k) {
    for (size_t c = 0; c < chunks_per_segment_; ++c) {
      if (Chunk(Mod(rank_ - k - 1), c).size() > 0) ++reduce_scatter_messages;
      Range r = Chunk(Mod(rank_ - k), c);
      if (r.size() > 0) finals.push_back(WireBytes(r));
    }
  }
  return ring_->PostRecvsInto(reduce_scatter_messages, finals);
}

absl::Span<uint8_t> RingAllreduce::WireBytes(Range r) {
  uint8_t* dst = options_.wire == WireFormat::kFp32
                     ? reinterpret_cast<uint8_t*>(data_.data() + r.begin)
                     : reinterpret_cast<uint8_t*>(staging_.data() + r.begin);
  return absl::MakeSpan(dst, r.size() * ElementBytes());
}

std::pair<size_t, size_t> OwnedRange(size_t length, int peers, int rank) {
  if (peers <= 1) return {0, length};
  const int segment = (rank + 1) % peers;  // the same split as RingAllreduce::Chunk
  return {length * segment / peers, length * (segment + 1) / peers};
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

absl::Status RingAllreduce::SendChunk(Range r, std::optional<uint32_t> crc32c) {
  if (r.size() == 0) return absl::OkStatus();  // both ends skip empty chunks
  absl::Span<const uint8_t> bytes = WireBytes(r);
  bytes_sent_ += bytes.size();
  return crc32c ? ring_->SendToNextWithCrc32c(bytes, *crc32c) : ring_->SendToNext(bytes);
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

uint32_t RingAllreduce::ReduceChunk(Range r) {
  const size_t n = r.size();
  uint32_t crc = 0;
  if (n == 0) return crc;
  // Block by block, so each block's sum is checksummed while it is still in L1
  // (one pass over the chunk instead of two).
  constexpr size_t kBlock = 4096;  // elements
  if (options_.wire == WireFormat::kFp32) {
    float* local = data_.data() + r.begin;
    const uint8_t* in = inbox_.data();
    for (size_t b = 0; b < n; b += kBlock) {
      const size_t end = std::min(n, b + kBlock);
      for (size_t i = b; i < end; ++i) {
        float incoming;
        std::memcpy(&incoming, in + 4 * i, 4);
        local[i] = incoming + local[i];
      }
      crc = Crc32cExtend(crc, local + b, 4 * (end - b));
    }
    return crc;
  }
  // The partial sum rounded to bf16 is what travels on; its rounding error stays here.
  incoming_.resize(n);
  std::memcpy(incoming_.data(), inbox_.data(), 2 * n);
  for (size_t b = 0; b < n; b += kBlock) {
    const size_t m = std::min(n - b, kBlock), at = r.begin + b;
    AddAndRoundToBf16(incoming_.data() + b, data_.data() + at, staging_.data() + at,
                      residual_.empty() ? nullptr : residual_.data() + at, m);
    crc = Crc32cExtend(crc, staging_.data() + at, 2 * m);
  }
  return crc;
}

absl::Status RingAllreduce::RecvFinalChunk(Range r) {
  if (r.size() == 0) return absl::OkStatus();
  return NameFinalChunkLoss(ring_->RecvFromPrevInto(WireBytes(r), &inbox_, options_.timeout));
}

absl::Status RingAllreduce::NameFinalChunkLoss(absl::Status st) const {
  if (st.ok() || st.code() != absl::StatusCode::kDataLoss) return st;
  return absl::Status(st.code(), absl::StrFormat("allreduce: peer %d, final chunk from peer %d: %s",
                                                 rank_, Mod(rank_ - 1), st.message()));
}

absl::Status RingAllreduce::RecvLastFinalChunks(int segment) {
  std::vector<absl::Span<uint8_t>> dsts;
  for (size_t c = 0; c < chunks_per_segment_; ++c) {
    Range r = Chunk(segment, c);
    if (r.size() > 0) dsts.push_back(WireBytes(r));
  }
  return NameFinalChunkLoss(ring_->RecvFromPrevIntoAll(dsts, &inbox_, options_.timeout));
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
