// Overlaps gradient communication with backward compute.
//
// The gradient span is cut into buckets of `bucket_bytes` from the END (the last
// layers finish backward first): bucket 0 = the last bucket_floats floats, bucket 1
// the ones before, ...; the lowest bucket may be shorter. The cut depends only on
// (length, bucket_bytes), so every peer forms the same buckets.
//
// Per step: Start(grads, step) on the compute thread; then GradReady(o) whenever
// grads[o, end) are final (o decreasing, as Gpt::ForwardBackward's grad_ready
// reports); a communication thread owned by the reducer runs each bucket's exchange
// (BucketExchange: codec + error feedback) as soon as the bucket is complete, in
// order bucket 0, 1, ..., while compute continues; Finish() marks everything ready,
// waits for the last bucket and reports only the time it actually waited.
//
// Contract: between Start and Finish the caller must not touch grads[o, end) after
// reporting o, nor use the transport (the communication thread owns it). Outside a
// step the caller may use the transport (e.g. small collectives) on its own thread.
// After a failed step the reducer refuses further steps (the ring's state is
// unknown) until SetRing gives it a new transport.
//
// Steps that are not applied (bucket_exchange.h "Steps that are not applied"): a
// step's effect on the residuals is final once CommitStep() is called or the next
// Start() begins; RollbackStep() instead undoes it for every bucket that ran, so a
// step interrupted by a view change (or whose result was discarded for any other
// reason) can be redone without leaving a trace in error feedback.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "collective/bucket_exchange.h"
#include "collective/codec_spec.h"
#include "collective/ring_allreduce.h"
#include "net/ring_transport.h"

namespace rt::collective {

struct BucketedReducerOptions {
  size_t bucket_bytes = size_t{25} << 20;  // fp32 bytes per bucket (--bucket-mb)
  AllreduceOptions allreduce;              // chunking and timeouts
  int64_t topk_warmup_steps = 0;           // --topk-warmup
  int64_t topk_refresh_every = 0;          // --topk-refresh (codec_spec.h IsTopKRefreshStep)
  // [begin, end) float ranges of the whole span always sent dense under top-k
  // (biases, LayerNorm); sorted and disjoint.
  std::vector<IndexRange> dense_ranges;
  CodecSpec codec;  // initial codec of every bucket
  // Preconditioned top-k (optim/adamw.h, "Preconditioned steps"): from step
  // `precondition_from` on (-1 = never), the communication thread passes each bucket
  // of this peer's gradient, with its offset in the whole span, to `precondition`
  // just before the bucket's exchange (before error feedback and compression). Set by
  // the trainer through GradientReducer::SetPreconditioner.
  int64_t precondition_from = -1;
  std::function<void(absl::Span<float> bucket, size_t offset)> precondition;
};

struct ReduceStepStats {
  double comm_wait_ms = 0;             // time Finish() waited: communication not hidden by compute
  uint64_t bytes_sent = 0;             // by this peer, all buckets
  std::vector<ExchangeStats> buckets;  // per bucket, in bucket order
};

class BucketedReducer {
 public:
  struct Bucket {
    size_t begin, end;  // [begin, end) floats of the gradient span
  };

  // `ring` must outlive the reducer. length: floats in the gradient span.
  BucketedReducer(net::RingTransport* ring, size_t length, BucketedReducerOptions options);
  ~BucketedReducer();  // stops the communication thread (after the current bucket)
  BucketedReducer(const BucketedReducer&) = delete;
  BucketedReducer& operator=(const BucketedReducer&) = delete;

  // The cut (see the file comment): bucket 0 ends at `length`.
  static std::vector<Bucket> Cut(size_t length, size_t bucket_bytes);
  const std::vector<Bucket>& buckets() const { return buckets_; }
  size_t length() const { return length_; }  // floats in the gradient span

  // Codec of one bucket / all buckets from the next Start() on (between steps).
  void SetCodec(size_t bucket, const CodecSpec& spec);
  void SetCodecAll(const CodecSpec& spec);
  // Between steps: the precondition hook (see BucketedReducerOptions).
  void SetPreconditioner(std::function<void(absl::Span<float>, size_t)> fn);
  const CodecSpec& codec(size_t bucket) const { return codecs_[bucket]; }

  // Between steps: continue on `ring` (re-formed in another order, or another
  // membership; it must outlive the reducer, or be replaced before it dies; null =
  // none until the next SetRing: Start fails). Buckets, codecs and error-feedback
  // residuals are kept. Error during a step.
  absl::Status SetRing(net::RingTransport* ring);

  // Between steps: the last step's residuals are final / undone (see the file
  // comment). Errors during a step. step_pending(): a step ran and neither happened yet.
  absl::Status CommitStep();
  absl::Status RollbackStep();
  bool step_pending() const;
  bool active() const;  // between Start and Finish

  // Begins a step over `grads` (length floats; stays valid until Finish returns).
  absl::Status Start(absl::Span<float> grads, int64_t step);
  // grads[offset, length) are final. Thread-safe; cheap; offsets may repeat.
  void GradReady(size_t offset);
  // Everything is final: waits for all buckets. grads then holds the sum over peers.
  absl::Status Finish(ReduceStepStats* stats);

  // Error-feedback state of a bucket (for tests and reports): as the last step left it
  // (a dense bucket's residual that went out with the sum reads zero only once the
  // step is committed).
  absl::Span<const float> residual(size_t bucket) const { return exchanges_[bucket]->residual(); }

 private:
  void CommLoop();

  net::RingTransport* ring_;  // guarded by mu_ (read under it by the comm thread)
  const size_t length_;
  BucketedReducerOptions options_;  // precondition may change between steps
  std::vector<Bucket> buckets_;
  std::vector<CodecSpec> codecs_;
  std::vector<std::unique_ptr<BucketExchange>> exchanges_;

  mutable std::mutex mu_;
  std::condition_variable wake_comm_;  // ready offset moved / step started / stop
  std::condition_variable wake_finish_;
  bool stop_ = false;
  bool active_ = false;      // a step is running
  bool broken_ = false;      // a step failed
  bool pending_ = false;     // a step ran; not yet committed or rolled back
  size_t ready_offset_ = 0;  // grads[ready_offset_, length) are final
  size_t next_bucket_ = 0;   // next bucket the comm thread will run
  absl::Span<float> grads_;
  int64_t step_ = 0;
  absl::Status step_status_;
  ReduceStepStats step_stats_;
  std::thread comm_thread_;  // last: starts after everything above is initialised
};

}  // namespace rt::collective
