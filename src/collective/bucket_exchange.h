// One gradient bucket's exchange with a codec and its error-feedback state.
//
// Run() turns this peer's local gradient for the bucket into the sum over all
// peers (identical bytes on every peer), using the codec chosen for this call:
//   none  fp32 ring allreduce (any residual left from an earlier codec is added in
//         first, so switching codecs loses nothing);
//   bf16  v = grads + residual; bf16 ring allreduce; the rounding errors this peer
//         made stay in its residual;
//   topk  v = grads + residual; exactly k = density(step)*n largest |v| outside the
//         dense ranges (plus all of the dense ranges) are encoded and exchanged by
//         sparse allgather; the rest stays in the residual. Falls back to the dense
//         fp32 path (residual flushed) when alone or when N*density >= 2.
// The residual persists across steps (one buffer of the bucket's size, allocated
// on first use of a lossy codec).
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "collective/codec_spec.h"
#include "collective/ring_allreduce.h"
#include "collective/topk_select.h"
#include "core/aligned_buffer.h"
#include "net/ring_transport.h"

namespace rt::collective {

struct ExchangeStats {
  uint64_t bytes_sent = 0;  // by this peer
  std::string codec_used;   // e.g. "topk:0.01", "none" (after fallbacks)
  size_t entries_sent = 0;  // top-k: entries this peer encoded
  double encode_ms = 0;     // selection + encoding
  double exchange_ms = 0;   // communication and decode/sum
};

class BucketExchange {
 public:
  // length: floats in the bucket (< 2^32). dense_ranges: sorted, disjoint,
  // relative to the bucket; sent dense under top-k.
  BucketExchange(size_t length, std::vector<IndexRange> dense_ranges);

  // grads: the bucket (length floats). step: 0-based optimizer step (for the top-k
  // warm-up). Every peer must pass the same spec, step, length and options.
  absl::Status Run(net::RingTransport* ring, absl::Span<float> grads, const CodecSpec& spec,
                   int64_t step, int64_t topk_warmup_steps, const AllreduceOptions& options,
                   ExchangeStats* stats);

  // What error feedback keeps for later steps (empty before any lossy codec).
  absl::Span<const float> residual() const { return residual_.span(); }

 private:
  void FoldResidualInto(absl::Span<float> grads);  // grads += residual; residual = 0
  absl::Status RunDense(net::RingTransport* ring, absl::Span<float> grads,
                        const AllreduceOptions& options, ExchangeStats* stats);

  size_t length_;
  std::vector<IndexRange> dense_ranges_;
  size_t sparse_count_ = 0;
  AlignedBuffer<float> residual_;
  SparseVector selection_;
  std::vector<uint8_t> encoded_;
};

}  // namespace rt::collective
