// Quantised ring allreduce (see quantized_allreduce.h).
#include "collective/quantized_allreduce.h"

#include <algorithm>
#include <deque>
#include <vector>

#include "absl/strings/str_format.h"
#include "collective/block_quant.h"
#include "core/status_macros.h"
#include "net/ring_sends.h"

namespace rt::collective {
namespace {

struct Range {
  size_t begin, end;
};

class QuantizedRing {
 public:
  QuantizedRing(net::RingTransport* ring, absl::Span<float> data, absl::Span<float> residual,
                const QuantizedAllreduceOptions& o)
      : ring_(ring),
        data_(data),
        residual_(residual),
        o_(o),
        n_(ring->size()),
        rank_(ring->rank()) {
    const size_t longest = (data.size() + n_ - 1) / n_;
    chunks_ =
        std::max<size_t>(1, (longest + o.chunk_values - 1) / std::max<size_t>(1, o.chunk_values));
  }

  absl::Status Run() {
    // Reduce-scatter, step k: send segment rank-k (ours at k = 0, else the partial sum
    // received at step k-1 plus ours), receive segment rank-k-1 and add ours to it.
    for (int k = 0; k < n_ - 1; ++k) {
      const int send_seg = Mod(rank_ - k), recv_seg = Mod(rank_ - k - 1);
      for (size_t c = 0; c < chunks_; ++c) {
        RETURN_IF_ERROR(SendEncoded(Chunk(send_seg, c)));
        const Range r = Chunk(recv_seg, c);
        RETURN_IF_ERROR(Receive(r));
        for (size_t i = r.begin; i < r.end; ++i) data_[i] = scratch_[i - r.begin] + data_[i];
      }
    }
    // Segment rank+1 is complete here: quantise it once and use those bytes, as every
    // other peer will.
    const int mine = Mod(rank_ + 1);
    for (size_t c = 0; c < chunks_; ++c) {
      const Range r = Chunk(mine, c);
      RETURN_IF_ERROR(SendEncoded(r));
      RETURN_IF_ERROR(DecodeInto(sent_.back(), r));
    }
    // Allgather, step k: the final bytes of segment rank-k arrive; decode, pass on
    // unchanged (not at the last step: the successor made them).
    for (int k = 0; k < n_ - 1; ++k) {
      const int seg = Mod(rank_ - k);
      for (size_t c = 0; c < chunks_; ++c) {
        const Range r = Chunk(seg, c);
        RETURN_IF_ERROR(ring_->RecvFromPrev(&inbox_, o_.timeout));
        RETURN_IF_ERROR(DecodeInto(inbox_, r));
        if (k < n_ - 2) {
          sent_.push_back(inbox_);
          RETURN_IF_ERROR(Send(sent_.back()));
        }
      }
    }
    return ring_->WaitSendsDone(o_.timeout);
  }

  uint64_t bytes_sent() const { return bytes_sent_; }

 private:
  int Mod(int i) const { return ((i % n_) + n_) % n_; }
  Range Chunk(int segment, size_t c) const {
    const size_t n = data_.size();
    const size_t seg_begin = n * segment / n_, seg_len = n * (segment + 1) / n_ - seg_begin;
    return {seg_begin + seg_len * c / chunks_, seg_begin + seg_len * (c + 1) / chunks_};
  }
  // Quantises data[r] (what this peer sends on), keeping the error in residual[r].
  absl::Status SendEncoded(Range r) {
    sent_.emplace_back();
    EncodeQuantized(
        data_.subspan(r.begin, r.end - r.begin), o_.bits,
        residual_.empty() ? absl::Span<float>() : residual_.subspan(r.begin, r.end - r.begin),
        &sent_.back());
    return Send(sent_.back());
  }
  // The bytes stay in sent_ (a deque: stable addresses) until WaitSendsDone.
  absl::Status Send(const std::vector<uint8_t>& bytes) {
    bytes_sent_ += bytes.size();
    return ring_->SendToNext(bytes);
  }
  absl::Status Receive(Range r) {
    RETURN_IF_ERROR(ring_->RecvFromPrev(&inbox_, o_.timeout));
    scratch_.resize(r.end - r.begin);
    return Named(DecodeQuantized(inbox_, o_.bits, r.end - r.begin, absl::MakeSpan(scratch_)));
  }
  absl::Status DecodeInto(const std::vector<uint8_t>& bytes, Range r) {
    return Named(
        DecodeQuantized(bytes, o_.bits, r.end - r.begin, data_.subspan(r.begin, r.end - r.begin)));
  }
  absl::Status Named(absl::Status s) const {
    if (s.ok()) return s;
    return absl::Status(s.code(), absl::StrFormat("quantized allreduce, peer %d from peer %d: %s",
                                                  rank_, Mod(rank_ - 1), s.message()));
  }

  net::RingTransport* ring_;
  absl::Span<float> data_, residual_;
  QuantizedAllreduceOptions o_;
  int n_, rank_;
  size_t chunks_ = 1;
  std::deque<std::vector<uint8_t>> sent_;
  std::vector<uint8_t> inbox_;
  std::vector<float> scratch_;
  uint64_t bytes_sent_ = 0;
};

}  // namespace

absl::Status QuantizedRingAllreduce(net::RingTransport* ring, absl::Span<float> data,
                                    absl::Span<float> residual,
                                    const QuantizedAllreduceOptions& options,
                                    uint64_t* bytes_sent) {
  if (options.bits != 8 && options.bits != 4) {
    return absl::InvalidArgumentError(
        absl::StrFormat("quantized allreduce: %d bits is not 8 or 4", options.bits));
  }
  if (!residual.empty() && residual.size() != data.size()) {
    return absl::InvalidArgumentError("quantized allreduce: residual and data differ in size");
  }
  if (ring->size() == 1) {  // alone: the sum is our contribution, nothing is rounded
    std::fill(residual.begin(), residual.end(), 0.0f);
    return absl::OkStatus();
  }
  QuantizedRing q(ring, data, residual, options);
  absl::Status s = q.Run();
  if (!s.ok()) net::DrainSendsAfterError(ring, options.timeout);
  if (bytes_sent != nullptr) *bytes_sent += q.bytes_sent();
  return s;
}

}  // namespace rt::collective
