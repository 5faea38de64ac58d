// The piece exchange as straight-line rounds: gather descriptors, plan, copy what is
// local, then walk the plan's transfers chunk by chunk (see piece_exchange.h).
#include "collective/piece_exchange.h"

#include <algorithm>
#include <array>
#include <mutex>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "collective/small_collectives.h"
#include "core/status_macros.h"

namespace rt::collective {
namespace {

using Stages = std::vector<std::vector<float>>;

// Staging buffers a send still reads after WaitSendsDone timed out (a successor that
// stopped reading, its link not yet closed): kept for the process's life rather than
// freed under the transport's writer. Rare: the ring is being given up.
void KeepForWriter(Stages stages) {
  static std::mutex mu;
  static std::vector<Stages>* kept = new std::vector<Stages>();
  std::lock_guard<std::mutex> lock(mu);
  kept->push_back(std::move(stages));
}

absl::Status Annotate(const absl::Status& status, const std::string& context) {
  if (status.ok()) return status;
  return absl::Status(status.code(), absl::StrCat(context, ": ", status.message()));
}

absl::Span<uint8_t> AsBytes(absl::Span<float> floats) {
  return {reinterpret_cast<uint8_t*>(floats.data()), floats.size() * sizeof(float)};
}

std::vector<FloatRange> WithoutEmpty(const std::vector<FloatRange>& ranges) {
  std::vector<FloatRange> out;
  for (const FloatRange& r : ranges) {
    if (r.first < r.second) out.push_back(r);
  }
  return out;
}

// [begin, end) of `ranges`' range that contains `offset` (which one does).
FloatRange RangeAt(const std::vector<FloatRange>& ranges, size_t offset) {
  auto it = std::upper_bound(ranges.begin(), ranges.end(), offset,
                             [](size_t x, const FloatRange& r) { return x < r.second; });
  return *it;
}

class PieceExchange {
 public:
  PieceExchange(net::RingTransport* ring, size_t length, int buffers,
                const std::vector<FloatRange>& held, const std::vector<FloatRange>& needed,
                const PieceReader& read, const PieceWriter& write,
                const PieceExchangeOptions& options)
      : ring_(ring),
        length_(length),
        buffers_(buffers),
        held_(held),
        needed_(needed),
        read_(read),
        write_(write),
        options_(options) {}
  PieceExchange(const PieceExchange&) = delete;
  PieceExchange& operator=(const PieceExchange&) = delete;

  absl::StatusOr<PieceExchangeResult> Run() {
    RETURN_IF_ERROR(CheckArguments());
    held_ = WithoutEmpty(held_);
    needed_ = WithoutEmpty(needed_);
    ASSIGN_OR_RETURN(std::vector<PieceDescriptor> members, GatherDescriptors());
    const PiecePlan plan = PlanPieceExchange(members);
    result_.lost = plan.lost;
    // Nothing local depends on the network: copy it while the ring is idle anyway.
    RETURN_IF_ERROR(CopyLocal());
    absl::Status status;
    for (const PieceTransfer& t : plan.transfers) {
      status = RunTransfer(t);
      if (!status.ok()) break;
    }
    RETURN_IF_ERROR(FinishSends(status));
    return result_;
  }

 private:
  static constexpr int kStages = 4;  // chunks this member may have queued at once

  absl::Status CheckArguments() const {
    if (buffers_ < 1 || buffers_ > kMaxPieceBuffers) {
      return absl::InvalidArgumentError(
          absl::StrFormat("piece exchange: %d buffers (1..%d)", buffers_, kMaxPieceBuffers));
    }
    if (options_.chunk_floats < 1 || options_.chunk_floats > kMaxPieceChunkFloats) {
      return absl::InvalidArgumentError(
          absl::StrFormat("piece exchange: %d floats per chunk (1..%d)", options_.chunk_floats,
                          kMaxPieceChunkFloats));
    }
    RETURN_IF_ERROR(Annotate(CheckPieceRanges(held_, length_, "held"), "piece exchange"));
    return Annotate(CheckPieceRanges(needed_, length_, "needed"), "piece exchange");
  }

  // Step (1): every member's descriptor, checked against ours. Every member sees the
  // same bytes, so every member refuses the same one.
  absl::StatusOr<std::vector<PieceDescriptor>> GatherDescriptors() {
    PieceDescriptor mine;
    mine.length = length_;
    mine.buffers = buffers_;
    mine.chunk_floats = options_.chunk_floats;
    mine.held = held_;
    mine.needed = needed_;
    const std::vector<uint8_t> bytes = EncodePieceDescriptor(mine);
    ASSIGN_OR_RETURN(auto all, AllgatherBytes(ring_, bytes, options_.timeout));
    for (int k = 0; k + 1 < ring_->size(); ++k) {  // AllgatherBytes passes on all but one
      result_.descriptor_bytes_sent +=
          all[(ring_->rank() - k + ring_->size()) % ring_->size()].size();
    }
    std::vector<PieceDescriptor> members;
    for (size_t p = 0; p < all.size(); ++p) {
      absl::StatusOr<PieceDescriptor> d = DecodePieceDescriptor(all[p]);
      if (!d.ok()) return Annotate(d.status(), absl::StrFormat("piece exchange: peer %d", p));
      auto differs = [&](const char* what, uint64_t theirs, uint64_t ours) {
        return absl::FailedPreconditionError(
            absl::StrFormat("piece exchange: peer %d has %s %d, peer %d has %d", p, what, theirs,
                            ring_->rank(), ours));
      };
      if (d->length != length_) return differs("length", d->length, length_);
      if (d->buffers != buffers_) return differs("buffers", d->buffers, buffers_);
      if (d->chunk_floats != options_.chunk_floats) {
        return differs("chunk_floats", d->chunk_floats, options_.chunk_floats);
      }
      members.push_back(*std::move(d));
    }
    return members;
  }

  // Reads [range) of one buffer from inside one held range, checking the size.
  absl::StatusOr<absl::Span<const float>> Read(int buffer, FloatRange range) {
    absl::Span<const float> floats = read_(buffer, range);
    if (floats.size() != range.second - range.first) {
      return absl::InvalidArgumentError(
          absl::StrFormat("piece exchange: read(buffer %d, [%d, %d)) returned %d floats", buffer,
                          range.first, range.second, floats.size()));
    }
    return floats;
  }

  // Every float both held and needed here, per buffer, split where a held or needed
  // range ends (read and write each take one range at a time).
  absl::Status CopyLocal() {
    for (int b = 0; b < buffers_; ++b) {
      size_t h = 0, n = 0;
      while (h < held_.size() && n < needed_.size()) {
        const size_t begin = std::max(held_[h].first, needed_[n].first);
        const size_t end = std::min(held_[h].second, needed_[n].second);
        if (begin < end) {
          ASSIGN_OR_RETURN(absl::Span<const float> floats, Read(b, {begin, end}));
          write_(b, begin, floats);
          result_.floats_written += end - begin;
        }
        (held_[h].second < needed_[n].second) ? ++h : ++n;
      }
    }
    return absl::OkStatus();
  }

  // Step (3) for one transfer: nothing unless this member is on its way.
  absl::Status RunTransfer(const PieceTransfer& t) {
    const int n = ring_->size();
    const int at = (ring_->rank() - t.sender + n) % n;  // hops from the sender
    if (at > t.hops) return absl::OkStatus();
    const bool forwards = at < t.hops;
    const bool writes =
        std::find(t.receivers.begin(), t.receivers.end(), ring_->rank()) != t.receivers.end();
    for (int b = 0; b < buffers_; ++b) {
      for (size_t begin = t.range.first; begin < t.range.second; begin += options_.chunk_floats) {
        const FloatRange chunk{begin, std::min(t.range.second, begin + options_.chunk_floats)};
        const size_t len = chunk.second - chunk.first;
        ASSIGN_OR_RETURN(const int k, FreeStage(len));
        absl::Span<float> floats(stages_[k].data(), len);
        if (at == 0) {
          RETURN_IF_ERROR(Pack(b, chunk, floats));
        } else {
          RETURN_IF_ERROR(Annotate(
              ring_->RecvFromPrevInto(AsBytes(floats), &scratch_, options_.timeout),
              absl::StrFormat("piece exchange: receiving [%d, %d) of buffer %d from peer %d",
                              chunk.first, chunk.second, b, t.sender)));
          result_.floats_received += len;
        }
        if (forwards) {
          RETURN_IF_ERROR(Annotate(ring_->SendToNext(AsBytes(floats)),
                                   absl::StrFormat("piece exchange: sending [%d, %d) of buffer %d",
                                                   chunk.first, chunk.second, b)));
          in_flight_[k] = true;
          result_.bytes_sent += len * sizeof(float);
        }
        if (writes) Unpack(b, chunk, floats);
      }
    }
    return absl::OkStatus();
  }

  // The sender fills a message from as many held ranges as it spans.
  absl::Status Pack(int buffer, FloatRange chunk, absl::Span<float> out) {
    for (size_t x = chunk.first; x < chunk.second;) {
      const size_t end = std::min(chunk.second, RangeAt(held_, x).second);
      ASSIGN_OR_RETURN(absl::Span<const float> floats, Read(buffer, {x, end}));
      std::copy(floats.begin(), floats.end(), out.begin() + (x - chunk.first));
      x = end;
    }
    return absl::OkStatus();
  }

  // A receiver writes a message one needed range at a time.
  void Unpack(int buffer, FloatRange chunk, absl::Span<const float> floats) {
    for (size_t x = chunk.first; x < chunk.second;) {
      const size_t end = std::min(chunk.second, RangeAt(needed_, x).second);
      write_(buffer, x, floats.subspan(x - chunk.first, end - x));
      result_.floats_written += end - x;
      x = end;
    }
  }

  // The next staging buffer, sized for `floats`. One still queued for the successor
  // is reused only after WaitSendsDone: every queued send is of an earlier chunk, so
  // the wait never depends on this member's later messages (no deadlock).
  absl::StatusOr<int> FreeStage(size_t floats) {
    const int k = next_stage_;
    next_stage_ = (k + 1) % kStages;
    if (in_flight_[k]) {
      RETURN_IF_ERROR(
          Annotate(ring_->WaitSendsDone(options_.timeout), "piece exchange: waiting for sends"));
      in_flight_.fill(false);
    }
    if (stages_[k].size() < floats) stages_[k].resize(floats);
    return k;
  }

  // Waits for the queued sends whatever `status` is (the transport may still read the
  // staging buffers); keeps them alive for good if that wait timed out.
  absl::Status FinishSends(const absl::Status& status) {
    if (std::none_of(in_flight_.begin(), in_flight_.end(), [](bool b) { return b; })) {
      return status;
    }
    const absl::Status sent = ring_->WaitSendsDone(options_.timeout);
    if (absl::IsDeadlineExceeded(sent)) KeepForWriter(std::move(stages_));
    RETURN_IF_ERROR(status);
    return Annotate(sent, "piece exchange: waiting for sends");
  }

  net::RingTransport* const ring_;
  const size_t length_;
  const int buffers_;
  std::vector<FloatRange> held_, needed_;
  const PieceReader& read_;
  const PieceWriter& write_;
  const PieceExchangeOptions options_;

  Stages stages_ = Stages(kStages);
  std::array<bool, kStages> in_flight_{};  // queued since the last WaitSendsDone
  int next_stage_ = 0;
  std::vector<uint8_t> scratch_;  // for transports that receive, then copy
  PieceExchangeResult result_;
};

}  // namespace

absl::StatusOr<PieceExchangeResult> ExchangePieces(net::RingTransport* ring, size_t length,
                                                   int buffers, const std::vector<FloatRange>& held,
                                                   const std::vector<FloatRange>& needed,
                                                   const PieceReader& read,
                                                   const PieceWriter& write,
                                                   const PieceExchangeOptions& options) {
  return PieceExchange(ring, length, buffers, held, needed, read, write, options).Run();
}

}  // namespace rt::collective
