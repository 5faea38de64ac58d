// Bucketed reducer: bucket cut, step hand-off, and the communication thread.
#include "collective/bucketed_reducer.h"

#include <algorithm>

#include "absl/strings/str_format.h"
#include "core/clock.h"
#include "core/status_copy.h"

namespace rt::collective {

BucketedReducer::BucketedReducer(net::RingTransport* ring, size_t length,
                                 BucketedReducerOptions options)
    : ring_(ring),
      length_(length),
      options_(std::move(options)),
      buckets_(Cut(length_, options_.bucket_bytes)) {
  for (const Bucket& b : buckets_) {
    std::vector<IndexRange> dense;  // the dense ranges inside b, relative to b
    for (const IndexRange& r : options_.dense_ranges) {
      const size_t lo = std::max(r.begin, b.begin), hi = std::min(r.end, b.end);
      if (lo < hi) dense.push_back({lo - b.begin, hi - b.begin});
    }
    exchanges_.push_back(std::make_unique<BucketExchange>(b.end - b.begin, std::move(dense)));
  }
  codecs_.assign(buckets_.size(), options_.codec);
  comm_thread_ = std::thread([this] { CommLoop(); });
}

std::vector<BucketedReducer::Bucket> BucketedReducer::Cut(size_t length, size_t bucket_bytes) {
  std::vector<Bucket> buckets;
  const size_t per_bucket = std::max<size_t>(1, bucket_bytes / sizeof(float));
  for (size_t end = length; end > 0;) {
    const size_t begin = end > per_bucket ? end - per_bucket : 0;
    buckets.push_back({begin, end});
    end = begin;
  }
  return buckets;
}

BucketedReducer::~BucketedReducer() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  wake_comm_.notify_all();
  comm_thread_.join();
}

void BucketedReducer::SetCodec(size_t bucket, const CodecSpec& spec) {
  std::lock_guard<std::mutex> lock(mu_);
  codecs_[bucket] = spec;
}

void BucketedReducer::SetCodecAll(const CodecSpec& spec) {
  std::lock_guard<std::mutex> lock(mu_);
  codecs_.assign(buckets_.size(), spec);
}

void BucketedReducer::SetPreconditioner(std::function<void(absl::Span<float>, size_t)> fn) {
  std::lock_guard<std::mutex> lock(mu_);
  options_.precondition = std::move(fn);
}

absl::Status BucketedReducer::SetRing(net::RingTransport* ring) {
  std::lock_guard<std::mutex> lock(mu_);
  if (active_) return absl::FailedPreconditionError("bucketed reducer: SetRing during a step");
  ring_ = ring;
  broken_ = false;
  return absl::OkStatus();
}

absl::Status BucketedReducer::CommitStep() {
  std::lock_guard<std::mutex> lock(mu_);
  if (active_) return absl::FailedPreconditionError("bucketed reducer: CommitStep during a step");
  for (auto& e : exchanges_) e->Commit();
  pending_ = false;
  return absl::OkStatus();
}

absl::Status BucketedReducer::RollbackStep() {
  std::lock_guard<std::mutex> lock(mu_);
  if (active_) {
    return absl::FailedPreconditionError("bucketed reducer: RollbackStep during a step");
  }
  for (auto& e : exchanges_) e->Rollback();
  pending_ = false;
  return absl::OkStatus();
}

bool BucketedReducer::step_pending() const {
  std::lock_guard<std::mutex> lock(mu_);
  return pending_;
}

bool BucketedReducer::active() const {
  std::lock_guard<std::mutex> lock(mu_);
  return active_;
}

absl::Status BucketedReducer::Start(absl::Span<float> grads, int64_t step) {
  std::lock_guard<std::mutex> lock(mu_);
  if (ring_ == nullptr) return absl::FailedPreconditionError("bucketed reducer: no ring");
  if (broken_) {
    return absl::FailedPreconditionError(
        "bucketed reducer: an earlier step failed; the ring must be re-formed");
  }
  if (active_) return absl::FailedPreconditionError("bucketed reducer: step already started");
  if (grads.size() != length_) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "bucketed reducer: gradient span has %d floats, the reducer was built for %d", grads.size(),
        length_));
  }
  if (pending_) {  // the previous step is final (each exchange also commits on its next Run)
    for (auto& e : exchanges_) e->Commit();
  }
  pending_ = true;
  grads_ = grads;
  step_ = step;
  ready_offset_ = length_;
  next_bucket_ = 0;
  step_status_ = absl::OkStatus();
  step_stats_ = ReduceStepStats();
  step_stats_.buckets.resize(buckets_.size());
  active_ = true;
  return absl::OkStatus();
}

void BucketedReducer::GradReady(size_t offset) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!active_ || offset >= ready_offset_) return;
    ready_offset_ = offset;
  }
  wake_comm_.notify_one();
}

absl::Status BucketedReducer::Finish(ReduceStepStats* stats) {
  Stopwatch wait;
  std::unique_lock<std::mutex> lock(mu_);
  if (!active_) return absl::FailedPreconditionError("bucketed reducer: Finish without Start");
  ready_offset_ = 0;
  wake_comm_.notify_one();
  // On failure the comm thread skips the remaining buckets (next_bucket_ = size).
  wake_finish_.wait(lock, [&] { return next_bucket_ == buckets_.size(); });
  active_ = false;
  step_stats_.comm_wait_ms = wait.ElapsedMs();
  for (const ExchangeStats& b : step_stats_.buckets) step_stats_.bytes_sent += b.bytes_sent;
  if (stats != nullptr) *stats = step_stats_;
  if (!step_status_.ok()) broken_ = true;
  return FreshCopy(step_status_);
}

void BucketedReducer::CommLoop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    // Bucket b may run once the compute thread has reported everything from its
    // begin on as final.
    wake_comm_.wait(lock, [&] {
      return stop_ || (active_ && next_bucket_ < buckets_.size() &&
                       ready_offset_ <= buckets_[next_bucket_].begin);
    });
    if (stop_) return;
    const size_t b = next_bucket_;
    const Bucket bucket = buckets_[b];
    const CodecSpec spec = codecs_[b];
    absl::Span<float> grads = grads_.subspan(bucket.begin, bucket.end - bucket.begin);
    const int64_t step = step_;
    net::RingTransport* ring = ring_;
    ExchangeStats stats;
    const bool precondition = options_.precondition && options_.precondition_from >= 0 &&
                              step >= options_.precondition_from;
    lock.unlock();
    if (precondition) options_.precondition(grads, bucket.begin);
    absl::Status status =
        exchanges_[b]->Run(ring, grads, spec, step, options_.topk_warmup_steps,
                           options_.topk_refresh_every, options_.allreduce, &stats);
    lock.lock();
    step_stats_.buckets[b] = stats;
    if (!status.ok()) {
      step_status_ = FreshCopy(status);  // read on the compute thread
      next_bucket_ = buckets_.size();    // skip the rest: the ring is in an unknown state
    } else {
      ++next_bucket_;
    }
    if (next_bucket_ == buckets_.size()) wake_finish_.notify_all();
  }
}

}  // namespace rt::collective
