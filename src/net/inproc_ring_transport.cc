// In-process ring transport: one mutex-protected message queue per directed link
// i -> (i+1) % n. Received vectors are recycled to the sender to avoid allocation.
#include "net/inproc_ring_transport.h"

#include <condition_variable>
#include <deque>
#include <mutex>
#include <utility>

#include "absl/strings/str_format.h"
#include "absl/time/clock.h"

namespace rt::net {
namespace {

// The directed link from peer `from` to its successor.
struct Link {
  std::mutex mu;
  std::condition_variable arrived;
  std::deque<std::vector<uint8_t>> queue;   // messages not yet received, oldest first
  std::vector<std::vector<uint8_t>> spare;  // emptied vectors handed back by the receiver
  bool sender_gone = false;
  bool receiver_gone = false;
};

class InProcessRingTransport final : public RingTransport {
 public:
  InProcessRingTransport(int rank, int size, std::shared_ptr<Link> out, std::shared_ptr<Link> in)
      : rank_(rank), size_(size), out_(std::move(out)), in_(std::move(in)) {}

  ~InProcessRingTransport() override {
    if (size_ == 1) return;
    {
      std::lock_guard<std::mutex> lock(out_->mu);
      out_->sender_gone = true;
    }
    out_->arrived.notify_all();
    std::lock_guard<std::mutex> lock(in_->mu);
    in_->receiver_gone = true;
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }

  absl::Status SendToNext(absl::Span<const uint8_t> data) override {
    if (size_ == 1) {
      return absl::FailedPreconditionError("in-process ring of 1 peer: there is no successor");
    }
    std::vector<uint8_t> message;
    {
      std::lock_guard<std::mutex> lock(out_->mu);
      if (out_->receiver_gone) return PeerGone(Next(), "send to");
      if (!out_->spare.empty()) {
        message = std::move(out_->spare.back());
        out_->spare.pop_back();
      }
    }
    message.assign(data.begin(), data.end());  // copy outside the lock
    {
      std::lock_guard<std::mutex> lock(out_->mu);
      out_->queue.push_back(std::move(message));
    }
    out_->arrived.notify_one();
    return absl::OkStatus();
  }

  absl::Status WaitSendsDone(absl::Duration) override {
    if (size_ == 1) return absl::OkStatus();
    std::lock_guard<std::mutex> lock(out_->mu);
    if (out_->receiver_gone) return PeerGone(Next(), "send to");
    return absl::OkStatus();  // SendToNext copied every message already
  }

  absl::Status RecvFromPrev(std::vector<uint8_t>* message, absl::Duration timeout) override {
    if (size_ == 1) {
      return absl::FailedPreconditionError("in-process ring of 1 peer: there is no predecessor");
    }
    std::unique_lock<std::mutex> lock(in_->mu);
    const auto deadline = absl::ToChronoTime(absl::Now() + timeout);
    bool ready = in_->arrived.wait_until(lock, deadline,
                                         [&] { return !in_->queue.empty() || in_->sender_gone; });
    if (!ready) {
      return absl::DeadlineExceededError(
          absl::StrFormat("peer %d: no message from predecessor peer %d within %s", rank_, Prev(),
                          absl::FormatDuration(timeout)));
    }
    if (in_->queue.empty()) return PeerGone(Prev(), "receive from");
    std::vector<uint8_t> old = std::move(*message);
    *message = std::move(in_->queue.front());
    in_->queue.pop_front();
    // Hand the caller's old vector back to the sender so its capacity is reused.
    if (old.capacity() > 0 && in_->spare.size() < 64) in_->spare.push_back(std::move(old));
    return absl::OkStatus();
  }

 private:
  int Next() const { return (rank_ + 1) % size_; }
  int Prev() const { return (rank_ + size_ - 1) % size_; }
  absl::Status PeerGone(int peer, const char* what) const {
    return absl::UnavailableError(
        absl::StrFormat("peer %d: cannot %s peer %d: its transport is closed", rank_, what, peer));
  }

  const int rank_;
  const int size_;
  std::shared_ptr<Link> out_;  // to the successor
  std::shared_ptr<Link> in_;   // from the predecessor
};

}  // namespace

std::vector<std::unique_ptr<RingTransport>> MakeInProcessRing(int n) {
  std::vector<std::shared_ptr<Link>> links;  // links[i]: i -> (i+1) % n
  for (int i = 0; i < n; ++i) links.push_back(std::make_shared<Link>());
  std::vector<std::unique_ptr<RingTransport>> ring;
  for (int i = 0; i < n; ++i) {
    ring.push_back(
        std::make_unique<InProcessRingTransport>(i, n, links[i], links[(i + n - 1) % n]));
  }
  return ring;
}

}  // namespace rt::net
