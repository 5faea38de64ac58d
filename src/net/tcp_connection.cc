// TcpConnection: framed reads and gather writes (on the io thread during the
// handshake, then on the connection's reader and writer threads), queues for users.
#include "net/tcp_connection.h"

#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <climits>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/crc32c.h"
#include "core/status_copy.h"
#include "core/status_macros.h"

namespace rt::net {
namespace {

// Handshake frames are tiny; a stranger must not make us allocate the data limit.
constexpr uint64_t kMaxHandshakePayload = 64 << 10;
constexpr size_t kMaxFramesPerWrite = 16;
constexpr size_t kSpareVectors = 32;

// Lets one async_write/async_read move up to 64 MiB per system call instead of
// Asio's default 64 KiB, so large messages stream with few wake-ups.
size_t LargeTransfer(const asio::error_code& ec, size_t) { return ec ? 0 : (size_t{64} << 20); }

template <typename Pred>
bool WaitFor(std::condition_variable& cv, std::unique_lock<std::mutex>& lock,
             absl::Duration timeout, Pred pred) {
  if (timeout == absl::InfiniteDuration()) {
    cv.wait(lock, pred);
    return true;
  }
  auto deadline = std::chrono::steady_clock::now() + absl::ToChronoNanoseconds(timeout);
  return cv.wait_until(lock, deadline, pred);
}

}  // namespace

TcpConnection::TcpConnection(asio::ip::tcp::socket socket, std::string peer_name,
                             const LinkOptions& options)
    : socket_(std::move(socket)),
      options_(options),
      order_(peer_name),
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

void TcpConnection::Establish(int peer_rank, std::string peer_name) {
  established_ = true;
  handshake_handler_ = nullptr;
  peer_rank_.store(peer_rank);
  order_.set_peer(peer_name);
  std::lock_guard<std::mutex> lock(mu_);
  peer_name_ = std::move(peer_name);
}

// ---------------------------------------------------------------- reading

void TcpConnection::ReadHeader() {
  auto self = shared_from_this();
  asio::async_read(socket_, asio::buffer(header_bytes_, kFrameHeaderBytes),
                   [self](const asio::error_code& ec, size_t) { self->OnHeader(ec); });
}

void TcpConnection::OnHeader(const asio::error_code& ec) {
  if (ec) return FailFromReader(ErrorFromAsio(ec, "waiting for a frame"));
  const std::string peer = peer_name();
  uint64_t limit = established_ ? options_.max_payload_bytes : kMaxHandshakePayload;
  absl::StatusOr<FrameHeader> header = DecodeFrameHeader(header_bytes_, limit, peer);
  if (!header.ok()) return FailFromReader(header.status());
  order_.set_min_epoch(min_epoch_.load());
  absl::Status order = order_.Check(*header);
  if (!order.ok()) return FailFromReader(order);
  FrameType t = header->type;
  bool allowed =
      t == FrameType::kError || (established_ ? (t == FrameType::kData || t == FrameType::kControl)
                                              : (t == FrameType::kHello || t == FrameType::kProof ||
                                                 t == FrameType::kFingerprint));
  if (!allowed) {
    return FailFromReader(absl::FailedPreconditionError(
        absl::StrFormat("%s sent a %s frame %s the handshake", peer, FrameTypeName(t),
                        established_ ? "after" : "before completing")));
  }
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
  payload_received_ = 0;
  payload_crc_ = 0;
  if (header_.payload_bytes == 0) return FinishFrame();
  if (!reader_threaded_) ReadPayload();  // the reader thread reads the payload itself
}

// Reads whatever has arrived straight into the message buffer and checksums it
// while it is still in cache.
void TcpConnection::ReadPayload() {
  auto self = shared_from_this();
  uint8_t* dst = read_dst_ + payload_received_;
  size_t want = read_len_ - payload_received_;
  socket_.async_read_some(
      asio::buffer(dst, want), [self, dst](const asio::error_code& ec, size_t n) {
        if (ec) return self->FailOnIoThread(self->ErrorFromAsio(ec, "receiving a frame payload"));
        self->TakePayloadBytes(dst, n);
        if (self->payload_received_ < self->read_len_) return self->ReadPayload();
        self->FinishFrame();
      });
}

void TcpConnection::TakePayloadBytes(const uint8_t* bytes, size_t n) {
  payload_crc_ = Crc32cExtend(payload_crc_, bytes, n);
  payload_received_ += n;
  bytes_received_.fetch_add(n, std::memory_order_relaxed);
}

void TcpConnection::FinishFrame() {
  bytes_received_.fetch_add(kFrameHeaderBytes, std::memory_order_relaxed);
  const std::string peer = peer_name();
  if (payload_crc_ != header_.payload_crc32c) {
    return FailFromReader(absl::DataLossError(absl::StrFormat(
        "%s frame %d from %s has a corrupt payload (checksum 0x%08x, computed 0x%08x)",
        FrameTypeName(header_.type), header_.sequence, peer, header_.payload_crc32c,
        payload_crc_)));
  }
  switch (header_.type) {
    case FrameType::kError: {
      std::string reason(payload_.begin(), payload_.end());
      if (established_) {
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
    if (established_ && options_.worker_threads) {
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

// ---------------------------------------------------------------- writing

absl::Status TcpConnection::Enqueue(FrameHeader header, absl::Span<const uint8_t> payload,
                                    std::vector<uint8_t> owned, bool close_after) {
  std::unique_lock<std::mutex> lock(mu_);
  if (!error_.ok()) return FreshCopy(error_);
  header.sequence = next_sequence_++;
  header.epoch = epoch_;
  header.step = step_;
  out_.emplace_back();
  OutFrame& f = out_.back();
  f.owned = std::move(owned);
  f.payload = f.owned.empty() ? payload : absl::MakeConstSpan(f.owned);
  f.is_data = header.type == FrameType::kData;
  f.close_after = close_after;
  if (f.is_data) ++pending_data_;
  EncodeFrameHeader(header, f.header.data());
  if (writer_threaded_) {
    if (!writing_) write_cv_.notify_one();
  } else if (!writing_ && !switch_pending_) {
    writing_ = true;
    auto self = shared_from_this();
    asio::post(socket_.get_executor(), [self] { self->WriteSome(); });
  }
  return absl::OkStatus();
}

absl::Status TcpConnection::SendOwned(FrameType type, std::vector<uint8_t> payload) {
  FrameHeader h;
  h.type = type;
  h.payload_bytes = payload.size();
  h.payload_crc32c = Crc32c(payload.data(), payload.size());
  return Enqueue(h, {}, std::move(payload), false);
}

void TcpConnection::SendErrorAndClose(const std::string& reason) {
  FrameHeader h;
  h.type = FrameType::kError;
  std::vector<uint8_t> payload(reason.begin(), reason.end());
  h.payload_bytes = payload.size();
  h.payload_crc32c = Crc32c(payload.data(), payload.size());
  if (!Enqueue(h, {}, std::move(payload), true).ok()) Close();
}

absl::Status TcpConnection::SendData(absl::Span<const uint8_t> data, uint8_t codec) {
  // On the caller's thread, where the data is hot.
  return SendData(data, codec, Crc32c(data.data(), data.size()));
}

absl::Status TcpConnection::SendData(absl::Span<const uint8_t> data, uint8_t codec,
                                     uint32_t crc32c) {
  if (data.size() > options_.max_payload_bytes) {
    return absl::InvalidArgumentError(
        absl::StrFormat("message of %d bytes to %s exceeds the frame limit of %d bytes: split it",
                        data.size(), peer_name(), options_.max_payload_bytes));
  }
  FrameHeader h;
  h.type = FrameType::kData;
  h.codec = codec;
  h.payload_bytes = data.size();
  h.payload_crc32c = crc32c;
  return Enqueue(h, data, {}, false);
}

absl::Status TcpConnection::WaitSendsDone(absl::Duration timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  // On failure, wait until the io thread closed the socket: only then is no write
  // still reading the caller's bytes.
  // DeadlineExceeded therefore means "a write may still read them", any other error
  // that none does (callers that free their buffers on errors rely on it).
  bool done = WaitFor(cv_, lock, timeout, [&] { return pending_data_ == 0 || closed_; });
  if (pending_data_ == 0) return absl::OkStatus();  // all handed over, even if it failed since
  if (!done) {
    return absl::DeadlineExceededError(
        absl::StrFormat("%d message(s) to %s not sent within %s%s", pending_data_, peer_name_,
                        absl::FormatDuration(timeout),
                        error_.ok() ? "" : absl::StrCat(" (", error_.message(), ")")));
  }
  if (!error_.ok()) return FreshCopy(error_);
  return absl::OkStatus();
}

template <typename AddBuffer>
size_t TcpConnection::NextBatch(AddBuffer add) {
  // deque::push_back keeps references to existing elements valid, so the buffers
  // stay valid while users queue more frames.
  size_t frames = 0;
  for (auto it = out_.begin(); it != out_.end() && frames < kMaxFramesPerWrite; ++it) {
    ++frames;
    add(it->header.data(), it->header.size());
    if (!it->payload.empty()) add(it->payload.data(), it->payload.size());
    if (it->close_after) break;
  }
  return frames;
}

bool TcpConnection::PopWritten(size_t frames) {
  bool close = false;
  for (size_t i = 0; i < frames; ++i) {
    if (out_.front().is_data) --pending_data_;
    close = close || out_.front().close_after;
    out_.pop_front();
  }
  cv_.notify_all();
  return close;
}

void TcpConnection::WriteSome() {
  size_t frames = 0;
  write_buffers_.clear();
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!error_.ok()) return;
    frames = NextBatch([&](const uint8_t* data, size_t size) {
      write_buffers_.push_back(asio::buffer(data, size));
    });
  }
  auto self = shared_from_this();
  asio::async_write(socket_, write_buffers_, LargeTransfer,
                    [self, frames](const asio::error_code& ec, size_t bytes) {
                      self->bytes_sent_.fetch_add(bytes, std::memory_order_relaxed);
                      self->OnWritten(ec, frames);
                    });
}

void TcpConnection::OnWritten(const asio::error_code& ec, size_t frames) {
  if (ec) return FailOnIoThread(ErrorFromAsio(ec, "sending"));
  bool more = false;
  bool close = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    close = PopWritten(frames);
    // A pending switch to the worker threads waits for this write: it goes first.
    more = !out_.empty() && !switch_pending_;
    if (!more) writing_ = false;
  }
  if (close) return Close();
  if (more) return WriteSome();
  if (switch_pending_ && !reader_threaded_) SwitchToWorkers();
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
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }
  asio::error_code ignored;
  socket_.shutdown(asio::ip::tcp::socket::shutdown_both, ignored);  // no-op once released
  socket_.close(ignored);
  MarkClosed();
}

void TcpConnection::MarkClosed() {
  std::lock_guard<std::mutex> lock(mu_);
  closed_ = true;
  cv_.notify_all();
  batch_cv_.notify_all();
}

void TcpConnection::SetEpoch(uint64_t epoch) {
  std::lock_guard<std::mutex> lock(mu_);
  epoch_ = epoch;
  min_epoch_.store(epoch);
}

void TcpConnection::SetStep(uint64_t step) {
  std::lock_guard<std::mutex> lock(mu_);
  step_ = step;
}

// ---------------------------------------------------------------- worker threads

void TcpConnection::FailFromReader(const absl::Status& status) {
  if (reader_threaded_) return FailFromWorker(status);
  FailOnIoThread(status);
}

void TcpConnection::FailFromWorker(const absl::Status& status) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    SetError(status);
  }
  // The io thread reports it (its own copy: see FreshCopy), stops and joins the
  // workers and closes the socket. A weak pointer: a worker must never hold the last
  // reference (the destructor joins).
  std::weak_ptr<TcpConnection> weak = weak_from_this();
  asio::post(executor_, [weak, report = FreshCopy(status)] {
    if (auto self = weak.lock()) self->FailOnIoThread(report);
  });
}

void TcpConnection::SwitchToWorkers() {
  // io thread; no read or write of Asio's is in flight on the socket. switch_pending_
  // stays set until the workers own the socket: while it is set, Enqueue only queues
  // frames. Clearing it earlier let a user's send start an Asio write on the socket
  // being released: it failed with EBADF, or the writer thread waited forever for
  // writing_ to clear (a 20 s link-probe timeout in one CI run).
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (closed_) {
      switch_pending_ = false;
      return;
    }
  }
  if (options_.handover_pause > absl::ZeroDuration()) {
    std::this_thread::sleep_for(absl::ToChronoNanoseconds(options_.handover_pause));
  }
  asio::error_code ec;
  const int fd = socket_.release(ec);
  if (ec) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      switch_pending_ = false;
    }
    return FailOnIoThread(ErrorFromAsio(ec, "handing the socket to its threads"));
  }
  std::lock_guard<std::mutex> lock(mu_);
  switch_pending_ = false;
  executor_ = socket_.get_executor();
  fd_ = fd;
  // Blocking from now on: one system call per wake-up, no poll.
  const int flags = ::fcntl(fd_, F_GETFL, 0);
  if (flags >= 0) (void)::fcntl(fd_, F_SETFL, flags & ~O_NONBLOCK);
  reader_threaded_ = true;
  writer_threaded_ = true;
  reader_ = std::thread([this] { ReaderLoop(); });
  writer_ = std::thread([this] { WriterLoop(); });
}

void TcpConnection::StopWorkers() {
  std::lock_guard<std::mutex> join_lock(join_mu_);
  {
    std::lock_guard<std::mutex> lock(mu_);
    workers_stopping_ = true;
    write_cv_.notify_all();
    read_cv_.notify_all();
  }
  // Wakes a worker blocked in recv/send (the descriptor stays open until joined).
  if (fd_ >= 0) ::shutdown(fd_, SHUT_RDWR);
  if (reader_.joinable()) reader_.join();
  if (writer_.joinable()) writer_.join();
}

bool TcpConnection::ReadFully(uint8_t* dst, size_t n, bool payload, absl::Status* error) {
  size_t done = 0;
  while (done < n) {
    const ssize_t r = ::recv(fd_, dst + done, n - done, 0);
    if (r > 0) {
      if (payload) TakePayloadBytes(dst + done, static_cast<size_t>(r));
      done += static_cast<size_t>(r);
      continue;
    }
    if (r < 0 && errno == EINTR) continue;
    const asio::error_code ec = r == 0
                                    ? asio::error::make_error_code(asio::error::eof)
                                    : asio::error_code(errno, asio::error::get_system_category());
    *error = ErrorFromAsio(ec, payload ? "receiving a frame payload" : "waiting for a frame");
    return false;
  }
  return true;
}

bool TcpConnection::WriteFully(std::vector<struct iovec>* iovs, absl::Status* error) {
  std::vector<struct iovec>& iov = *iovs;  // advanced in place past what was sent
  size_t first = 0;
  while (first < iov.size()) {
    struct msghdr msg = {};
    msg.msg_iov = iov.data() + first;
    msg.msg_iovlen = std::min<size_t>(iov.size() - first, IOV_MAX);
    const ssize_t w = ::sendmsg(fd_, &msg, MSG_NOSIGNAL);
    if (w < 0) {
      if (errno == EINTR) continue;
      *error =
          ErrorFromAsio(asio::error_code(errno, asio::error::get_system_category()), "sending");
      return false;
    }
    bytes_sent_.fetch_add(static_cast<uint64_t>(w), std::memory_order_relaxed);
    size_t left = static_cast<size_t>(w);
    while (first < iov.size() && left >= iov[first].iov_len) left -= iov[first++].iov_len;
    if (left > 0) {
      iov[first].iov_base = static_cast<uint8_t*>(iov[first].iov_base) + left;
      iov[first].iov_len -= left;
    }
  }
  return true;
}

void TcpConnection::ReaderLoop() {
  // The same frame logic as the io thread's (OnHeader, FinishFrame), driven by a loop.
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      read_cv_.wait(lock, [&] { return !reading_paused_ || workers_stopping_ || !error_.ok(); });
      if (workers_stopping_ || !error_.ok()) return;
    }
    absl::Status error;
    if (!ReadFully(header_bytes_, kFrameHeaderBytes, false, &error)) {
      std::lock_guard<std::mutex> lock(mu_);
      if (workers_stopping_) return;  // the shutdown that stopped us
    }
    if (!error.ok()) return FailFromWorker(error);
    OnHeader({});
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!error_.ok()) return;
    }
    if (read_len_ == 0) continue;  // OnHeader finished the frame
    if (!ReadFully(read_dst_, read_len_, true, &error)) {
      std::lock_guard<std::mutex> lock(mu_);
      if (workers_stopping_) return;
    }
    if (!error.ok()) return FailFromWorker(error);
    FinishFrame();
  }
}

void TcpConnection::WriterLoop() {
  std::vector<struct iovec> iov;
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    write_cv_.wait(
        lock, [&] { return workers_stopping_ || !error_.ok() || (!out_.empty() && !writing_); });
    if (workers_stopping_ || !error_.ok()) return;
    writing_ = true;
    iov.clear();
    const size_t frames = NextBatch([&](const uint8_t* data, size_t size) {
      iov.push_back({const_cast<uint8_t*>(data), size});
    });
    lock.unlock();
    absl::Status error;
    const bool ok = WriteFully(&iov, &error);
    lock.lock();
    if (!ok) {
      if (workers_stopping_) return;
      lock.unlock();
      return FailFromWorker(error);
    }
    const bool close = PopWritten(frames);
    writing_ = false;
    if (close) {
      // Written: now close (on the io thread, which joins us).
      lock.unlock();
      std::weak_ptr<TcpConnection> weak = weak_from_this();
      asio::post(executor_, [weak] {
        if (auto self = weak.lock()) self->Close();
      });
      return;
    }
  }
}

}  // namespace rt::net
