// In-process ring transport: one mutex-protected message queue per directed link
// i -> (i+1) % n. In copy mode received vectors are recycled to the sender to avoid
// allocation; in zero-copy mode the receiver copies straight from the sender's span.
#include "net/inproc_ring_transport.h"

#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <utility>

#include "absl/strings/str_format.h"
#include "absl/time/clock.h"

namespace rt::net {
namespace {

// A queued message: its bytes (copy mode) or the sender's span (zero-copy mode), or
// nothing when it was delivered into a destination the receiver posted.
struct Message {
  std::vector<uint8_t> bytes;
  const uint8_t* borrowed = nullptr;
  size_t borrowed_size = 0;
  bool is_borrowed = false;
  bool in_place = false;  // already written into the posted destination
};

// The directed link from one peer to its successor.
struct Link {
  std::mutex mu;
  std::condition_variable arrived;          // a message was queued or the sender left
  std::condition_variable taken;            // a message was taken or the receiver left
  std::deque<Message> queue;                // messages not yet received, oldest first
  std::vector<std::vector<uint8_t>> spare;  // emptied vectors handed back by the receiver
  uint64_t sent = 0, received = 0;          // messages queued / taken so far
  // PostRecvsInto: destinations of messages posted_base, posted_base + 1, ...; the
  // sender writes a message of the right size into its destination as it sends it
  // (the earliest moment any transport could), under mu.
  std::deque<absl::Span<uint8_t>> posted;
  uint64_t posted_base = 0;
  bool posted_withdrawn = false;  // CancelRecvsInto dropped a message delivered in place
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
      const uint64_t number = out_->sent;
      if (number >= out_->posted_base && number - out_->posted_base < out_->posted.size()) {
        absl::Span<uint8_t> dst = out_->posted[number - out_->posted_base];
        if (dst.size() == data.size()) {
          if (!data.empty()) std::memcpy(dst.data(), data.data(), data.size());
          message = Message();
          message.in_place = true;
        }
      }
      out_->queue.push_back(std::move(message));
      ++out_->sent;
    }
    out_->arrived.notify_one();
    return absl::OkStatus();
  }

  absl::Status PostRecvsInto(size_t skip, absl::Span<const absl::Span<uint8_t>> dsts) override {
    if (size_ == 1) {
      return absl::FailedPreconditionError("in-process ring of 1 peer: there is no predecessor");
    }
    std::lock_guard<std::mutex> lock(in_->mu);
    const uint64_t first = in_->received + skip;
    if (!in_->posted.empty() && in_->posted_base + in_->posted.size() != first) {
      return absl::FailedPreconditionError(
          absl::StrFormat("peer %d: receive destinations posted out of order", rank_));
    }
    if (in_->posted.empty()) in_->posted_base = first;
    // Messages already sent stay queued: they are copied when received.
    for (absl::Span<uint8_t> dst : dsts) in_->posted.push_back(dst);
    return absl::OkStatus();
  }

  void CancelRecvsInto() override {
    if (size_ == 1) return;
    std::lock_guard<std::mutex> lock(in_->mu);
    for (const Message& m : in_->queue) in_->posted_withdrawn |= m.in_place;
    in_->posted.clear();
  }

  absl::Status RecvFromPrevInto(absl::Span<uint8_t> dst, std::vector<uint8_t>* scratch,
                                absl::Duration timeout) override {
    if (size_ == 1) {
      return absl::FailedPreconditionError("in-process ring of 1 peer: there is no predecessor");
    }
    {
      std::unique_lock<std::mutex> lock(in_->mu);
      const bool posted = !in_->posted.empty() && in_->posted_base == in_->received;
      if (posted &&
          (in_->posted.front().data() != dst.data() || in_->posted.front().size() != dst.size())) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "peer %d: RecvFromPrevInto got another destination than the one posted", rank_));
      }
      const auto deadline = absl::ToChronoTime(absl::Now() + timeout);
      in_->arrived.wait_until(lock, deadline,
                              [&] { return !in_->queue.empty() || in_->sender_gone; });
      if (in_->queue.empty()) {
        if (in_->sender_gone) return PeerGone(Prev(), "receive from");
        return absl::DeadlineExceededError(
            absl::StrFormat("peer %d: no message from predecessor peer %d within %s", rank_, Prev(),
                            absl::FormatDuration(timeout)));
      }
      if (posted) {  // this message's destination is used up either way
        in_->posted.pop_front();
        ++in_->posted_base;
      }
      if (in_->queue.front().in_place) {
        in_->queue.pop_front();
        ++in_->received;
        lock.unlock();
        in_->taken.notify_all();
        return absl::OkStatus();
      }
    }
    // Sent before its destination was posted, or of another size: receive and copy.
    return RingTransport::RecvFromPrevInto(dst, scratch, timeout);
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
    if (in_->queue.front().in_place) {
      return in_->posted_withdrawn
                 ? absl::DataLossError(absl::StrFormat(
                       "peer %d: the message was delivered into a withdrawn destination", rank_))
                 : absl::FailedPreconditionError(absl::StrFormat(
                       "peer %d: the next message was posted: receive it with RecvFromPrevInto",
                       rank_));
    }
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
