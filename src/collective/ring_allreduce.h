// Dense ring allreduce (reduce-scatter, then allgather) over a RingTransport.
//
// Bandwidth-optimal: with N peers each peer sends 2(N-1)/N of the buffer. The buffer
// is cut into N segments and each segment into chunks of about `chunk_bytes` on the
// wire; every chunk is received, reduced and passed on as soon as it arrives, so the
// transport's own I/O thread sends chunk k while this thread reduces chunk k+1.
//
// DESIGN invariant 2 (identical bytes everywhere). Segment s starts at its owner,
// peer s, and travels s -> s+1 -> ... -> s+N-1; each hop adds its own contribution
// to the partial sum it received. So the sum of segment s is always
// ((x_s + x_{s+1}) + x_{s+2}) + ... in ring order from the owner, whichever peer
// runs the code, and it is computed exactly once (by peer s-1). The allgather then
// only copies those final bytes around the ring: every peer ends with the same bits.
// (IEEE addition is commutative, so "incoming + local" vs "local + incoming" does
// not matter; only the association order does, and the ring fixes it.)
//
// Wire formats: fp32 (exact partial sums) or bf16 with error feedback: each peer
// rounds what it sends (its own contribution, or the partial sum it forwards) to
// bf16 and keeps the rounding error in `residual` at those positions, so the sum of
// all peers' residuals plus the result equals the sum of the inputs (up to fp32
// rounding of the additions). The result is the bf16-rounded sum, identical on all
// peers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "core/bf16.h"
#include "net/ring_transport.h"

namespace rt::collective {

enum class WireFormat { kFp32, kBf16 };

// What a RingAllreduce runs: both halves (the allreduce), or one of them alone, for
// optimizer sharding (ZeRO stage 1: reduce-scatter the gradients, each peer updates
// the parameters of the segment it owns, allgather the parameters). The halves move
// the same bytes as the allreduce does, and their results are bit for bit the
// allreduce's (see OwnedRange).
enum class RingPhases {
  kAllreduce,
  // Afterwards data[OwnedRange] holds the sum over all peers, exactly the bits the
  // allreduce would leave there (bf16 wire: the bf16-rounded sum, as a float; the
  // residual is the allreduce's too). The rest of data is left partially reduced.
  kReduceScatter,
  // Before: data[OwnedRange] is this peer's part (fp32 wire only). Afterwards every
  // peer's data holds every peer's part, each at its own range.
  kAllgather,
};

struct AllreduceOptions {
  size_t chunk_bytes = size_t{1} << 20;         // target wire bytes per message
  absl::Duration timeout = absl::Seconds(120);  // per receive / per wait for sends
  WireFormat wire = WireFormat::kFp32;
  RingPhases phases = RingPhases::kAllreduce;
  // Test fault (kAllgather only; empty in production): called once this peer's own
  // segment has left (its sends done), before it receives or forwards anything, so a
  // test can freeze the peer at the one moment where its successor holds that segment
  // and no peer holds what it would have forwarded (train/ring_gradient_reducer.h).
  std::function<void()> after_own_segment;
};

// The [begin, end) range of a `length`-float buffer whose complete sum the peer at ring
// position `rank` of `peers` computes (segment rank+1: the ring's sums travel from
// each segment's first peer to the one before it), and so the part it owns in a
// reduce-scatter and contributes in an allgather. The ranges of all positions cut the
// buffer into `peers` contiguous pieces whose lengths differ by at most one.
std::pair<size_t, size_t> OwnedRange(size_t length, int peers, int rank);

// One allreduce of one buffer. `ring` and the spans must outlive run(). Every peer
// must construct it with the same length and options.
class RingAllreduce {
 public:
  // data: this peer's contribution; after run() the sum over all peers.
  // residual (bf16 wire only; empty or data.size() floats): overwritten with this
  // peer's rounding error (zero when N == 1, where data is left unchanged).
  RingAllreduce(net::RingTransport* ring, absl::Span<float> data, const AllreduceOptions& options,
                absl::Span<float> residual = {});

  absl::Status run();

  uint64_t bytes_sent() const { return bytes_sent_; }

 private:
  struct Range {
    size_t begin, end;
    size_t size() const { return end - begin; }
  };
  // Own reduce-scatter chunks queued ahead of the one being received (see run()).
  static constexpr size_t kOwnLookahead = 4;
  int Mod(int i) const { return ((i % size_) + size_) % size_; }
  Range Chunk(int segment, size_t chunk) const;
  size_t ElementBytes() const { return options_.wire == WireFormat::kFp32 ? 4 : 2; }
  absl::Status Exchange();                 // run() without the clean-up on errors
  absl::Status ExchangeAllgather();        // RingPhases::kAllgather
  absl::Status PostFinalChunks();          // allgather destinations, announced to the transport
  absl::Span<uint8_t> WireBytes(Range r);  // r as it travels: in data_ (fp32) or staging_
  // crc32c: of the chunk's wire bytes when already known.
  absl::Status SendChunk(Range r, std::optional<uint32_t> crc32c = std::nullopt);
  absl::Status RecvChunk(Range r);                // into inbox_, checking its size
  absl::Status RecvLastFinalChunks(int segment);  // the last allgather step, in place
  void EncodeOwnChunk(Range r);                   // step 0: our contribution as it goes on the wire
  uint32_t ReduceChunk(Range r);         // partial sum in inbox_ + ours; returns its wire crc32c
  absl::Status RecvFinalChunk(Range r);  // a final sum, received straight into place
  absl::Status NameFinalChunkLoss(absl::Status st) const;  // DataLoss: says who and what
  void Finalize();                                         // bf16: final sums into data_

  net::RingTransport* ring_;
  absl::Span<float> data_;
  absl::Span<float> residual_;
  AllreduceOptions options_;
  int rank_, size_;
  size_t chunks_per_segment_ = 1;
  std::vector<bf16_t> staging_;  // bf16 wire: what we send / received final sums
  std::vector<uint8_t> inbox_;
  std::vector<bf16_t> incoming_;  // bf16 wire: inbox_ as aligned bf16
  uint64_t bytes_sent_ = 0;
};

// Sum over peers, in place (fp32 wire).
absl::Status AllreduceSum(net::RingTransport* ring, absl::Span<float> data,
                          const AllreduceOptions& options = {});

// Token-weighted average. `grads` holds this peer's gradient SUMMED over its
// `local_tokens` tokens (e.g. grad_scale = 1); afterwards every peer holds
// sum over peers / total tokens (identical bytes). *total_tokens (optional) gets
// the total. A total of 0 leaves the (all-zero) sums unscaled.
absl::Status AllreduceTokenAverage(net::RingTransport* ring, absl::Span<float> grads,
                                   uint64_t local_tokens, const AllreduceOptions& options = {},
                                   uint64_t* total_tokens = nullptr);

// data[i] *= 1 / divisor, the same float operation on every peer.
void ScaleByInverse(absl::Span<float> data, double divisor);

}  // namespace rt::collective
