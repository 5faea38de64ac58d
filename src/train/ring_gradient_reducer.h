// RingGradientReducer: the GradientReducer of a ring of peers (issue 4, items 5-6).
//
// Gradients go through collective::BucketedReducer: buckets cut from the end of the
// flat buffer are allreduced on the reducer's communication thread as soon as
// backward has finished them (OnGradReady), so communication overlaps compute; each
// peer's contribution is already scaled by 1/global_tokens (trainer.cc), so the sum
// is the token-weighted mean. Finish() waits for the last bucket, then sums the step
// totals (loss, tokens) with an exact small collective. comm_ms is the time Finish
// waited. Parameter hashes are compared with an allgather every `check_every` steps;
// a mismatch is an error naming the step and the peers on each side.
//
// Threads: all methods run on the training thread; the transport is used by the
// bucketed reducer's thread only between BeginStep and Finish, and by small
// collectives (on the training thread) outside that window.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "collective/bucketed_reducer.h"
#include "net/ring_transport.h"
#include "train/gradient_reducer.h"

namespace rt::train {

struct RingReducerOptions {
  collective::BucketedReducerOptions buckets;   // bucket size, codec, dense ranges, timeouts
  int check_every = 10;                         // compare param hashes every N steps (0 = never)
  absl::Duration timeout = absl::Seconds(120);  // small collectives: per receive
};

class RingGradientReducer final : public GradientReducer {
 public:
  // `ring` is owned (e.g. a net::TcpRing from JoinRing). `bytes_sent` (optional)
  // reports the transport's payload bytes sent so far; without it the reducer counts
  // the gradient bytes of its buckets only.
  RingGradientReducer(std::unique_ptr<net::RingTransport> ring, RingReducerOptions options,
                      std::function<uint64_t()> bytes_sent = {});
  ~RingGradientReducer() override;

  int rank() const override { return ring_->rank(); }
  int peers() const override { return ring_->size(); }

  absl::Status BeginStep(int64_t step, absl::Span<float> grads) override;
  void OnGradReady(size_t offset) override;
  absl::Status Finish(StepTotals* totals) override;
  absl::Status CheckParamHash(int64_t step, uint64_t param_hash) override;
  absl::Status SyncState(int64_t* step, const std::vector<absl::Span<float>>& state) override;
  uint64_t bytes_sent() const override;

  // Statistics of the last finished step (buckets, bytes, wait).
  const collective::ReduceStepStats& last_stats() const { return last_stats_; }

 private:
  std::unique_ptr<net::RingTransport> ring_;
  const RingReducerOptions options_;
  std::function<uint64_t()> transport_bytes_;
  std::unique_ptr<collective::BucketedReducer> buckets_;  // created at the first step
  size_t length_ = 0;
  int64_t step_ = 0;
  bool in_step_ = false;
  uint64_t counted_bytes_ = 0;
  collective::ReduceStepStats last_stats_;
};

// Copies the leader's (ring rank 0) `data` to every peer over the ring: rank 0 sends
// chunks of `chunk_bytes` to its successor, every other peer receives and forwards
// until the chunk reached the last peer. `data` has the same length on every peer.
absl::Status RingBroadcastFromRank0(net::RingTransport* ring, absl::Span<uint8_t> data,
                                    absl::Duration timeout, size_t chunk_bytes = size_t{4} << 20);

}  // namespace rt::train
