// TcpConnection, the user side: frames received (checked by frame_codec.h) go to the
// data and control queues or straight into posted destinations; errors and closing.
// Sends are in tcp_connection_send.cc, the engines that read and write the socket in
// tcp_connection_asio.cc (handshake) and tcp_connection_threads.cc (afterwards).
#include "net/tcp_connection.h"

#include <asio/post.hpp>

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/status_copy.h"
#include "core/status_macros.h"
#include "net/wait_for.h"

namespace rt::net {
namespace {

constexpr size_t kSpareVectors = 32;

}  // namespace

TcpConnection::TcpConnection(asio::ip::tcp::socket socket, std::string peer_name,
                             const LinkOptions& options)
    : socket_(std::move(socket)),
      options_(options),
      in_(peer_name, options.limits),
      peer_name_(std::move(peer_name)) {}

TcpConnection::~TcpConnection() {
  StopWorkers();
  // Every copy of error_ was made under mu_: taking it once orders those copies
  // before error_'s representation is freed here (see FreshCopy).
  { std::lock_guard<std::mutex> lock(mu_); }
  if (fd_ >= 0) ::close(fd_);  // released from Asio: ours to close
}

std::string TcpConnection::peer_name() const {
  std::lock_guard<std::mutex> lock(mu_);
  return peer_name_;
}

absl::Status TcpConnection::status() const {
  std::lock_guard<std::mutex> lock(mu_);
  return FreshCopy(error_);
}

void TcpConnection::StartReading(FrameHandler handshake_handler, ErrorHandler on_error) {
  handshake_handler_ = std::move(handshake_handler);
  {
    std::lock_guard<std::mutex> lock(mu_);
    on_error_ = std::move(on_error);
  }
  ReadHeader();
}

void TcpConnection::SetFrameKeys(const FrameKeys& keys) {
  in_.SetKey(keys.receive);  // io thread: the reader is the Asio engine until Establish
  std::lock_guard<std::mutex> send_lock(send_mu_);
  out_codec_.SetKey(keys.send);
  sealed_.store(true);
}

void TcpConnection::Establish(int peer_rank, std::string peer_name) {
  in_.set_established();
  handshake_handler_ = nullptr;
  peer_rank_.store(peer_rank);
  in_.set_peer(peer_name);
  std::lock_guard<std::mutex> lock(mu_);
  peer_name_ = std::move(peer_name);
}

// ---------------------------------------------------------------- frames read

bool TcpConnection::BeginFrame() {
  in_.set_min_epoch(min_epoch_.load());
  // Checks the type's limit before anything is allocated for the payload.
  absl::StatusOr<FrameHeader> header = in_.Begin(header_bytes_);
  if (!header.ok()) {
    FailFromReader(header.status());
    return false;
  }
  const FrameType t = header->type;
  header_ = *header;
  read_direct_ = false;
  payload_.clear();
  if (t == FrameType::kData) {
    std::lock_guard<std::mutex> lock(mu_);
    const uint64_t message = data_started_++;
    Posted* posted = PostedFor(message);
    if (posted != nullptr && posted->dst.size() == header_.payload_bytes) {
      // The user said where this message goes: read it there.
      posted->state = Posted::State::kReading;
      direct_message_ = message;
      read_direct_ = true;
      read_dst_ = posted->dst.data();
    } else {
      if (posted != nullptr) posted->state = Posted::State::kQueued;  // another size
      if (!spare_.empty()) {
        // A recycled buffer of the usual size: resize() below neither allocates nor
        // zero-fills, and its pages are already mapped.
        payload_ = std::move(spare_.back());
        spare_.pop_back();
        spare_bytes_ -= payload_.capacity();
      }
    }
  }
  if (!read_direct_) {
    payload_.resize(header_.payload_bytes);
    read_dst_ = payload_.data();
  }
  read_len_ = header_.payload_bytes;
  trailer_len_ = in_.trailer_bytes();
  payload_received_ = 0;
  return true;
}

// Reads whatever has arrived straight into the message buffer and checksums it
// while it is still in cache.

void TcpConnection::TakePayloadBytes(uint8_t* bytes, size_t n) {
  in_.TakePayload(bytes, n);
  payload_received_ += n;
  bytes_received_.fetch_add(n, std::memory_order_relaxed);
}

void TcpConnection::FinishFrame() {
  bytes_received_.fetch_add(kFrameHeaderBytes + trailer_len_, std::memory_order_relaxed);
  const std::string peer = peer_name();
  absl::Status intact = in_.Finish();  // crc32c, or the AES-GCM tag on sealed links
  if (!intact.ok()) return FailFromReader(intact);
  {
    std::lock_guard<std::mutex> lock(mu_);
    last_header_ = header_;
  }
  const bool established = in_.established();
  switch (header_.type) {
    case FrameType::kError: {
      std::string reason(payload_.begin(), payload_.end());
      if (established) {
        return FailFromReader(absl::AbortedError(peer + " reported an error: " + reason));
      }
      return FailFromReader(
          absl::FailedPreconditionError(peer + " refused the connection: " + reason));
    }
    case FrameType::kHello:
    case FrameType::kProof:
    case FrameType::kFingerprint:
      if (handshake_handler_) {
        FrameHandler handler = handshake_handler_;  // it may call Establish(), which resets it
        handler(header_, std::move(payload_));
      }
      break;
    case FrameType::kData:
      if (read_direct_) {
        std::lock_guard<std::mutex> lock(mu_);
        Posted* posted = PostedFor(direct_message_);
        if (posted != nullptr) posted->state = Posted::State::kDone;  // verified, in place
        in_place_.fetch_add(1, std::memory_order_relaxed);
        cv_.notify_all();
        if (direct_message_ >= batch_target_) batch_cv_.notify_all();
        break;
      }
      [[fallthrough]];
    case FrameType::kControl: {
      std::lock_guard<std::mutex> lock(mu_);
      auto& queue = header_.type == FrameType::kData ? data_in_ : control_in_;
      queued_bytes_ += payload_.size();
      queue.push_back(std::move(payload_));
      cv_.notify_all();
      if (header_.type == FrameType::kData && data_started_ - 1 >= batch_target_) {
        batch_cv_.notify_all();
      }
      if (QueuesFull()) {
        reading_paused_ = true;  // resumed by TakeFront once the user takes a message
        return;
      }
      break;
    }
  }
  if (reader_threaded_) return;  // the reader thread goes on with the next frame
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!error_.ok()) return;
    if (established && options_.worker_threads) {
      // Hand the socket to the worker threads at this frame boundary: now if no
      // write is in flight, else when it completes (OnWritten).
      switch_pending_ = true;
      if (writing_) return;
    }
  }
  if (switch_pending_) return SwitchToWorkers();
  ReadHeader();
}

absl::Status TcpConnection::WaitQueue(std::deque<std::vector<uint8_t>>* queue,
                                      std::vector<uint8_t>* message, absl::Duration timeout,
                                      const char* what) {
  std::unique_lock<std::mutex> lock(mu_);
  bool ready = WaitFor(cv_, lock, timeout, [&] { return !queue->empty() || !error_.ok(); });
  if (!queue->empty()) {
    TakeFront(queue, message);
    return absl::OkStatus();
  }
  if (!error_.ok()) return FreshCopy(error_);
  (void)ready;
  return TimedOut(what, timeout);
}

void TcpConnection::TakeFront(std::deque<std::vector<uint8_t>>* queue,
                              std::vector<uint8_t>* message) {
  // Swap, not copy: the caller gets the received buffer, its old one is recycled.
  std::swap(*message, queue->front());
  queued_bytes_ -= message->size();
  const size_t capacity = queue->front().capacity();
  if (capacity > 0 && spare_.size() < kSpareVectors &&
      spare_bytes_ + capacity <= options_.max_queued_bytes) {
    spare_bytes_ += capacity;
    spare_.push_back(std::move(queue->front()));
  }
  queue->pop_front();
  if (reading_paused_ && !QueuesFull() && error_.ok()) {
    reading_paused_ = false;
    if (reader_threaded_) {
      read_cv_.notify_one();
    } else {
      auto self = shared_from_this();
      asio::post(socket_.get_executor(), [self] { self->ReadHeader(); });
    }
  }
}

bool TcpConnection::QueuesFull() const {
  return data_in_.size() >= options_.max_queued_messages ||
         control_in_.size() >= options_.max_queued_messages ||
         queued_bytes_ >= options_.max_queued_bytes;
}

absl::Status TcpConnection::TimedOut(const char* what, absl::Duration timeout) const {
  return absl::DeadlineExceededError(absl::StrFormat("no %s message from %s within %s", what,
                                                     peer_name_, absl::FormatDuration(timeout)));
}

TcpConnection::Posted* TcpConnection::PostedFor(uint64_t message) {
  if (message < posted_base_ || message - posted_base_ >= posted_.size()) return nullptr;
  return &posted_[message - posted_base_];
}

absl::Status TcpConnection::PostRecvsInto(size_t skip, absl::Span<const absl::Span<uint8_t>> dsts) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!error_.ok()) return FreshCopy(error_);
  const uint64_t first = data_taken_ + skip;
  if (!posted_.empty() && posted_base_ + posted_.size() != first) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "receive destinations for data messages from %s posted out of order: message %d, "
        "expected %d",
        peer_name_, first, posted_base_ + posted_.size()));
  }
  if (posted_.empty()) posted_base_ = first;
  for (absl::Span<uint8_t> dst : dsts) {
    // A message the io thread already began reading goes through the queue.
    const uint64_t message = posted_base_ + posted_.size();
    posted_.push_back(
        Posted{dst, message < data_started_ ? Posted::State::kQueued : Posted::State::kWaiting,
               /*announced=*/true});
  }
  return absl::OkStatus();
}

void TcpConnection::CancelRecvsInto() {
  std::unique_lock<std::mutex> lock(mu_);
  bool reading = false, delivered = false;
  for (const Posted& p : posted_) {
    reading = reading || p.state == Posted::State::kReading;
    delivered = delivered || p.state == Posted::State::kDone;
  }
  if (reading || delivered) {
    // The message stream and the user's buffers no longer match: this link is done.
    SetError(absl::AbortedError(absl::StrFormat(
        "receiving from %s was abandoned with messages already read into place", peer_name_)));
    auto self = shared_from_this();
    absl::Status status = FreshCopy(error_);
    asio::post(socket_.get_executor(), [self, status] { self->FailOnIoThread(status); });
  }
  if (reading) cv_.wait(lock, [&] { return closed_; });  // io thread stopped writing
  // Messages marked kQueued stay in data_in_ as ordinary queued messages.
  posted_.clear();
}

absl::Status TcpConnection::RecvDataInto(absl::Span<uint8_t> dst, absl::Duration timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  const uint64_t message = data_taken_;
  Posted* posted = PostedFor(message);
  if (posted == nullptr && posted_.empty() && error_.ok()) {
    // Not announced: post it now, so it is read in place if it has not begun to arrive.
    posted_base_ = message;
    posted_.push_back(
        Posted{dst, message < data_started_ ? Posted::State::kQueued : Posted::State::kWaiting,
               /*announced=*/false});
    posted = &posted_.front();
  }
  if (posted != nullptr && (posted->dst.data() != dst.data() || posted->dst.size() != dst.size())) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "data message %d from %s: RecvDataInto got another destination than the one posted",
        message, peer_name_));
  }
  // Deque references stay valid while the io thread only reads and changes states.
  auto ready = [&] {
    if (posted == nullptr) return !data_in_.empty() || !error_.ok();
    return posted->state == Posted::State::kDone ||
           (posted->state == Posted::State::kQueued && !data_in_.empty()) || !error_.ok();
  };
  WaitFor(cv_, lock, timeout, ready);
  if (posted != nullptr && posted->state == Posted::State::kReading) {
    // Error or timeout with the payload half-read: the io thread still writes into
    // dst. Fail the connection and wait until the socket is closed.
    if (error_.ok()) {
      SetError(absl::DeadlineExceededError(
          absl::StrFormat("data message from %s stalled mid-frame for %s", peer_name_,
                          absl::FormatDuration(timeout))));
      auto self = shared_from_this();
      absl::Status status = FreshCopy(error_);
      asio::post(socket_.get_executor(), [self, status] { self->FailOnIoThread(status); });
    }
    cv_.wait(lock, [&] { return posted->state == Posted::State::kDone || closed_; });
  }
  if (posted != nullptr && posted->state == Posted::State::kDone) {
    posted_.pop_front();  // it is the front: every earlier message was taken
    ++posted_base_;
    ++data_taken_;
    return absl::OkStatus();
  }
  const bool queued =
      !data_in_.empty() && (posted == nullptr || posted->state == Posted::State::kQueued);
  if (!queued) {
    if (posted != nullptr && !posted->announced && posted->state == Posted::State::kWaiting) {
      posted_.pop_front();  // withdrawn: dst is not written after this call
      ++posted_base_;
    }
    return error_.ok() ? TimedOut("data", timeout) : FreshCopy(error_);
  }
  if (posted != nullptr) {
    posted_.pop_front();
    ++posted_base_;
  }
  // Arrived before its destination was known, or of another size: take it and copy.
  TakeFront(&data_in_, &copy_scratch_);
  ++data_taken_;
  lock.unlock();
  if (copy_scratch_.size() != dst.size()) {
    return absl::DataLossError(
        absl::StrFormat("expected a %d-byte data message from %s, got %d bytes", dst.size(),
                        peer_name(), copy_scratch_.size()));
  }
  if (!dst.empty()) std::memcpy(dst.data(), copy_scratch_.data(), dst.size());
  return absl::OkStatus();
}

absl::Status TcpConnection::RecvDataIntoAll(absl::Span<const absl::Span<uint8_t>> dsts,
                                            absl::Duration timeout) {
  if (dsts.empty()) return absl::OkStatus();
  {
    // Sleep until the last message is in place: the reader wakes this wait for that
    // message or an error only, not for each message before it. Bounded naps, so a
    // wake-up this path does not know of costs at most one of them.
    std::unique_lock<std::mutex> lock(mu_);
    const uint64_t last = data_taken_ + dsts.size() - 1;
    const auto deadline = std::chrono::steady_clock::now() + absl::ToChronoNanoseconds(timeout);
    auto last_ready = [&] {
      const Posted* p = PostedFor(last);
      const bool pending = p != nullptr && (p->state == Posted::State::kWaiting ||
                                            p->state == Posted::State::kReading);
      // A paused reader waits for queued messages to be taken: the loop below does.
      return !pending || !error_.ok() || closed_ || reading_paused_;
    };
    batch_target_ = last;
    while (!last_ready() && std::chrono::steady_clock::now() < deadline) {
      batch_cv_.wait_until(lock, std::min(deadline, std::chrono::steady_clock::now() +
                                                        std::chrono::milliseconds(50)));
    }
    batch_target_ = UINT64_MAX;
  }
  // Each message as RecvDataInto takes it: done ones at once, others as usual.
  for (absl::Span<uint8_t> dst : dsts) RETURN_IF_ERROR(RecvDataInto(dst, timeout));
  return absl::OkStatus();
}

absl::Status TcpConnection::RecvData(std::vector<uint8_t>* message, absl::Duration timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  if (PostedFor(data_taken_) != nullptr) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "data message %d from %s has a posted destination: receive it with RecvDataInto",
        data_taken_, peer_name_));
  }
  WaitFor(cv_, lock, timeout, [&] { return !data_in_.empty() || !error_.ok(); });
  if (!data_in_.empty()) {
    TakeFront(&data_in_, message);
    ++data_taken_;
    return absl::OkStatus();
  }
  return error_.ok() ? TimedOut("data", timeout) : FreshCopy(error_);
}

absl::Status TcpConnection::RecvControl(std::vector<uint8_t>* message, absl::Duration timeout) {
  return WaitQueue(&control_in_, message, timeout, "control");
}

// ---------------------------------------------------------------- errors

absl::Status TcpConnection::ErrorFromAsio(const asio::error_code& ec, const char* during) const {
  const std::string peer = peer_name();
  if (ec == asio::error::eof) {
    return absl::UnavailableError(
        absl::StrFormat("%s closed the connection (while %s)", peer, during));
  }
  if (ec == asio::error::connection_reset || ec == asio::error::broken_pipe) {
    return absl::UnavailableError(
        absl::StrFormat("connection to %s was reset (while %s): the peer died?", peer, during));
  }
  if (ec == asio::error::operation_aborted) {
    return absl::CancelledError(absl::StrFormat("connection to %s was closed", peer));
  }
  return absl::UnavailableError(
      absl::StrFormat("connection to %s failed while %s: %s", peer, during, ec.message()));
}

void TcpConnection::SetError(const absl::Status& status) {
  if (error_.ok()) error_ = FreshCopy(status);
  cv_.notify_all();
  batch_cv_.notify_all();
  write_cv_.notify_all();
  read_cv_.notify_all();
}

void TcpConnection::FailOnIoThread(const absl::Status& status) {
  ErrorHandler handler;
  {
    std::lock_guard<std::mutex> lock(mu_);
    SetError(status);
    if (!error_reported_) {
      error_reported_ = true;
      handler = std::move(on_error_);
    }
  }
  CloseSocket();
  if (handler) handler(status);
}

void TcpConnection::Fail(const absl::Status& status) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    SetError(status);
  }
  auto self = shared_from_this();
  asio::post(socket_.get_executor(),
             [self, report = FreshCopy(status)] { self->FailOnIoThread(report); });
}

void TcpConnection::Close() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    SetError(absl::CancelledError("connection to " + peer_name_ + " was closed"));
    error_reported_ = true;  // a deliberate close is not an error to report
    on_error_ = nullptr;
  }
  auto self = shared_from_this();
  asio::post(socket_.get_executor(), [self] { self->CloseSocket(); });
}

void TcpConnection::CloseSocket() {
  StopWorkers();
  {
    std::lock_guard<std::mutex> join_lock(join_mu_);
    info_fd_.store(-1);
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }
  asio::error_code ignored;
  socket_.shutdown(asio::ip::tcp::socket::shutdown_both, ignored);  // no-op once released
  socket_.close(ignored);
  MarkClosed();
}

int64_t TcpConnection::KernelRtoMs() const {
  std::lock_guard<std::mutex> join_lock(join_mu_);  // the descriptor stays open meanwhile
  const int fd = info_fd_.load();
  if (fd < 0) return -1;
  tcp_info info{};
  socklen_t len = sizeof(info);
  if (::getsockopt(fd, IPPROTO_TCP, TCP_INFO, &info, &len) != 0) return -1;
  return info.tcpi_rto / 1000;
}

void TcpConnection::MarkClosed() {
  std::lock_guard<std::mutex> lock(mu_);
  closed_ = true;
  cv_.notify_all();
  batch_cv_.notify_all();
}

void TcpConnection::SetEpoch(uint64_t epoch) {
  std::lock_guard<std::mutex> send_lock(send_mu_);
  out_codec_.set_epoch(epoch);
  min_epoch_.store(epoch);
}

void TcpConnection::SetStep(uint64_t step) {
  std::lock_guard<std::mutex> send_lock(send_mu_);
  out_codec_.set_step(step);
}

uint64_t TcpConnection::epoch() const { return min_epoch_.load(); }

FrameHeader TcpConnection::last_received_header() const {
  std::lock_guard<std::mutex> lock(mu_);
  return last_header_;
}

}  // namespace rt::net
