// One gradient bucket's exchange with a codec and its error-feedback state.
//
// Run() turns this peer's local gradient for the bucket into the sum over all
// peers (identical bytes on every peer), using the codec chosen for this call:
//   none  fp32 ring allreduce (any residual left from an earlier codec is added in
//         first, so switching codecs loses nothing);
//   bf16  v = grads + residual; bf16 ring allreduce; the rounding errors this peer
//         made stay in its residual;
//   int8, int4  v = grads + residual; ring allreduce of block-scaled integers
//         (quantized_allreduce.h); the quantisation errors of what this peer sent stay
//         in its residual (like bf16; a rolled-back step keeps them too);
//   topk  v = grads + residual; exactly k = density(step)*n largest |v| outside the
//         dense ranges (plus all of the dense ranges) are encoded and exchanged by
//         sparse allgather; the rest stays in the residual. Falls back to the dense
//         fp32 path (residual flushed) when alone or when N*density >= 2. On a
//         refresh step (codec_spec.h IsTopKRefreshStep) the bucket's gradient alone
//         goes out by the fp32 ring allreduce and the residual waits for later steps
//         untouched: the sum is this step's exact gradient, which AdamW's second
//         moment can learn from (a flushed residual holds many steps' worth of
//         gradient and would inflate it); codec_used is then "refresh".
// The residual persists across steps (one buffer of the bucket's size, allocated
// on first use of a lossy codec).
//
// Steps that are not applied. A Run is final once the next Run starts or Commit() is
// called; Rollback() instead undoes what the last Run did to the residual, for a step
// that was interrupted (a view change) and will be redone without it:
//   none  the residual folded into the exchange is kept (it is zeroed only on commit);
//   refresh  nothing to undo (the residual was not touched);
//   topk  the entries the Run selected are added back (residual[i] += sent[i]), so the
//         residual holds that step's gradient too, as if nothing had been selected:
//         exact (sent[i] + residual[i] == v[i] in fp32, topk_select.h) and O(k);
//   bf16  nothing: the residual keeps the rounding errors of the interrupted exchange,
//         which replace the previous ones (both are below bf16's resolution of the
//         values; an exact undo would need a copy of the whole residual every step).
// So, for none and top-k, over any sequence of Runs and Rollbacks: sum of what this
// peer sent in committed Runs + residual == sum of the gradients of committed Runs +
// the gradients of rolled-back top-k Runs (tests/train/residual_carry_test.cc).
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
  // warm-up and refresh steps, codec_spec.h). Every peer must pass the same spec, step,
  // length, schedule and options.
  absl::Status Run(net::RingTransport* ring, absl::Span<float> grads, const CodecSpec& spec,
                   int64_t step, int64_t topk_warmup_steps, int64_t topk_refresh_every,
                   const AllreduceOptions& options, ExchangeStats* stats);

  // What error feedback keeps for later steps (empty before any lossy codec).
  absl::Span<const float> residual() const { return residual_.span(); }

  // Between Runs: the last Run's effect on the residual is final / undone (see the
  // file comment). Both are idempotent and do nothing after a Commit or Rollback.
  void Commit();
  void Rollback();

 private:
  // What the last Run left to commit or undo.
  enum class Pending { kNothing, kFolded, kSelected };
  void AddResidualTo(absl::Span<float> grads);  // grads += residual (zeroed on commit)
  // fp32 ring allreduce of grads (+ the residual when fold_residual; see the file comment).
  absl::Status RunDense(net::RingTransport* ring, absl::Span<float> grads,
                        const AllreduceOptions& options, ExchangeStats* stats,
                        bool fold_residual = true);

  size_t length_;
  std::vector<IndexRange> dense_ranges_;
  size_t sparse_count_ = 0;
  AlignedBuffer<float> residual_;
  Pending pending_ = Pending::kNothing;
  SparseVector selection_;    // the last top-k Run's entries (kept for Rollback)
  TopKScratch topk_scratch_;  // SelectTopKWithFeedback's working memory, kept across steps
  std::vector<uint8_t> encoded_;
};

}  // namespace rt::collective
