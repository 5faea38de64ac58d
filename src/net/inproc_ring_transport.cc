// In-process ring transport: one mutex-protected message queue per directed link
// i -> (i+1) % n. In copy mode received vectors are recycled to the sender to avoid
// allocation; in zero-copy mode the receiver copies straight from the sender's span.
#include "net/inproc_ring_transport.h"

#include <condition_variable>
#include <deque>
#include <mutex>
#include <utility>

#include "absl/strings/str_format.h"
#include "absl/time/clock.h"

namespace rt::net {
namespace {

// A queued message: its bytes (copy mode) or the sender's span (zero-copy mode).
struct Message {
  std::vector<uint8_t> bytes;
  const uint8_t* borrowed = nullptr;
  size_t borrowed_size = 0;
  bool is_borrowed = false;
};

// The directed link from one peer to its successor.
struct Link {
  std::mutex mu;
  std::condition_variable arrived;          // a message was queued or the sender left
  std::condition_variable taken;            // a message was taken or the receiver left
  std::deque<Message> queue;                // messages not yet received, oldest first
  std::vector<std::vector<uint8_t>> spare;  // emptied vectors handed back by the receiver
  uint64_t sent = 0, received = 0;          // messages queued / taken so far
  bool sender_gone = false;
  bool receiver_gone = false;
};

class InProcessRingTransport final : public RingTransport {
 public:
  InProcessRingTransport(int rank, int size, bool zero_copy, std::shared_ptr<Link> out,
                         std::shared_ptr<Link> in)
      : rank_(rank), size_(size), zero_copy_(zero_copy), out_(std::move(out)), in_(std::move(in)) {}

  ~InProcessRingTransport() override {
    if (size_ == 1) return;
    {
      std::lock_guard<std::mutex> lock(out_->mu);
      out_->sender_gone = true;
    }
    out_->arrived.notify_all();
    {
      std::lock_guard<std::mutex> lock(in_->mu);
      in_->receiver_gone = true;
    }
    in_->taken.notify_all();
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }

  absl::Status SendToNext(absl::Span<const uint8_t> data) override {
    if (size_ == 1) {
      return absl::FailedPreconditionError("in-process ring of 1 peer: there is no successor");
    }
    Message message;
    {
      std::lock_guard<std::mutex> lock(out_->mu);
      if (out_->receiver_gone) return PeerGone(Next(), "send to");
      if (!zero_copy_ && !out_->spare.empty()) {
        message.bytes = std::move(out_->spare.back());
        out_->spare.pop_back();
      }
    }
    if (zero_copy_) {
      message.is_borrowed = true;
      message.borrowed = data.data();
      message.borrowed_size = data.size();
    } else {
      message.bytes.assign(data.begin(), data.end());  // copy outside the lock
    }
    {
      std::lock_guard<std::mutex> lock(out_->mu);
      out_->queue.push_back(std::move(message));
      ++out_->sent;
    }
    out_->arrived.notify_one();
    return absl::OkStatus();
  }

  absl::Status WaitSendsDone(absl::Duration timeout) override {
    if (size_ == 1) return absl::OkStatus();
    std::unique_lock<std::mutex> lock(out_->mu);
    if (zero_copy_) {  // the successor must have taken (copied) every message
      const auto deadline = absl::ToChronoTime(absl::Now() + timeout);
      bool done = out_->taken.wait_until(
          lock, deadline, [&] { return out_->received == out_->sent || out_->receiver_gone; });
      if (!done) {
        return absl::DeadlineExceededError(absl::StrFormat(
            "peer %d: successor peer %d did not take %d queued messages within %s", rank_, Next(),
            out_->sent - out_->received, absl::FormatDuration(timeout)));
      }
    }
    if (out_->receiver_gone) return PeerGone(Next(), "send to");
    return absl::OkStatus();  // copy mode: SendToNext copied every message already
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
    Message m = std::move(in_->queue.front());
    in_->queue.pop_front();
    if (m.is_borrowed) {
      // Copy from the sender's memory, which it must leave unchanged until its
      // WaitSendsDone returns; only then count the message as taken.
      lock.unlock();
      message->assign(m.borrowed, m.borrowed + m.borrowed_size);
      lock.lock();
      ++in_->received;
      lock.unlock();
      in_->taken.notify_all();
      return absl::OkStatus();
    }
    ++in_->received;
    std::vector<uint8_t> old = std::move(*message);
    *message = std::move(m.bytes);
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
  const bool zero_copy_;
  std::shared_ptr<Link> out_;  // to the successor
  std::shared_ptr<Link> in_;   // from the predecessor
};

}  // namespace

std::vector<std::unique_ptr<RingTransport>> MakeInProcessRing(int n,
                                                              const InProcessRingOptions& options) {
  std::vector<std::shared_ptr<Link>> links;  // links[i]: i -> (i+1) % n
  for (int i = 0; i < n; ++i) links.push_back(std::make_shared<Link>());
  std::vector<std::unique_ptr<RingTransport>> ring;
  for (int i = 0; i < n; ++i) {
    ring.push_back(std::make_unique<InProcessRingTransport>(i, n, options.zero_copy, links[i],
                                                            links[(i + n - 1) % n]));
  }
  return ring;
}

}  // namespace rt::net
