// TcpConnection, the sending side: frames are stamped and (on sealed links) sealed on
// the caller's thread, queued, and written by whichever engine owns the socket
// (tcp_connection_asio.cc during the handshake, tcp_connection_threads.cc after it);
// WaitSendsDone tells the caller when its bytes are no longer read.
#include <array>

#include <asio/post.hpp>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/status_copy.h"
#include "net/tcp_connection.h"
#include "net/wait_for.h"

namespace rt::net {
namespace {

// Spare sealed-frame buffers per connection: at most this many, and bytes.
constexpr size_t kSpareSealed = 64;
constexpr size_t kSpareSealedBytes = size_t{64} << 20;

}  // namespace

// ---------------------------------------------------------------- sending

absl::Status TcpConnection::Enqueue(FrameType type, uint8_t codec,
                                    absl::Span<const uint8_t> payload, const uint32_t* crc32c,
                                    std::vector<uint8_t> owned, bool close_after) {
  if (!owned.empty()) payload = owned;
  std::lock_guard<std::mutex> send_lock(send_mu_);
  std::vector<uint8_t> sealed;
  const bool seal = out_codec_.NextIsSealed();
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!error_.ok()) return FreshCopy(error_);
    if (seal && !spare_sealed_.empty()) {
      sealed = std::move(spare_sealed_.back());
      spare_sealed_.pop_back();
      spare_sealed_bytes_ -= sealed.capacity();
    }
  }
  // Sealing runs here, on the sender's thread where the bytes are hot, outside mu_.
  std::array<uint8_t, kFrameHeaderBytes> header;
  absl::StatusOr<FrameHeader> h =
      out_codec_.Encode(type, codec, payload, crc32c, header.data(), &sealed);
  if (!h.ok()) {
    Fail(h.status());
    return h.status();
  }
  std::unique_lock<std::mutex> lock(mu_);
  if (!error_.ok()) return FreshCopy(error_);
  out_.emplace_back();
  OutFrame& f = out_.back();
  f.header = header;
  if (seal) {
    f.owned = std::move(sealed);  // ciphertext + tag: the caller's bytes are free already
    f.recycle = true;
  } else {
    f.owned = std::move(owned);
  }
  f.payload = f.owned.empty() ? payload : absl::MakeConstSpan(f.owned);
  f.is_data = type == FrameType::kData;
  f.close_after = close_after;
  if (f.is_data) ++pending_data_;
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
  const uint64_t limit = options_.limits.For(type);
  if (payload.size() > limit) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s message of %d bytes to %s exceeds the limit of %d bytes for its type",
                        FrameTypeName(type), payload.size(), peer_name(), limit));
  }
  if (payload.empty()) return Enqueue(type, 0, {}, nullptr, {}, false);
  return Enqueue(type, 0, {}, nullptr, std::move(payload), false);
}

void TcpConnection::SendErrorAndClose(const std::string& reason) {
  std::vector<uint8_t> payload(
      reason.begin(),
      reason.begin() + std::min<size_t>(reason.size(), options_.limits.error_bytes));
  if (!Enqueue(FrameType::kError, 0, {}, nullptr, std::move(payload), true).ok()) Close();
}

absl::Status TcpConnection::SendData(absl::Span<const uint8_t> data, uint8_t codec) {
  // On the caller's thread, where the data is hot (Enqueue seals it there too).
  return Enqueue(FrameType::kData, codec, data, nullptr, {}, false);
}

absl::Status TcpConnection::SendData(absl::Span<const uint8_t> data, uint8_t codec,
                                     uint32_t crc32c) {
  if (data.size() > options_.limits.data_bytes) {
    return absl::InvalidArgumentError(
        absl::StrFormat("message of %d bytes to %s exceeds the frame limit of %d bytes: split it",
                        data.size(), peer_name(), options_.limits.data_bytes));
  }
  return Enqueue(FrameType::kData, codec, data, &crc32c, {}, false);
}

absl::Status TcpConnection::WaitSendsDone(absl::Duration timeout) {
  return WaitSendsAtMost(0, timeout);
}

size_t TcpConnection::pending_data_messages() const {
  std::lock_guard<std::mutex> lock(mu_);
  return pending_data_;
}

absl::Status TcpConnection::WaitSendsAtMost(size_t frames, absl::Duration timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  // On failure, wait until the io thread closed the socket: only then is no write
  // still reading the caller's bytes.
  // DeadlineExceeded therefore means "a write may still read them", any other error
  // that none does (callers that free their buffers on errors rely on it).
  bool done = WaitFor(cv_, lock, timeout, [&] { return pending_data_ <= frames || closed_; });
  if (pending_data_ == 0) return absl::OkStatus();  // all handed over, even if it failed since
  if (pending_data_ <= frames && error_.ok()) return absl::OkStatus();
  if (!done) {
    return absl::DeadlineExceededError(
        absl::StrFormat("%d message(s) to %s not sent within %s%s", pending_data_, peer_name_,
                        absl::FormatDuration(timeout),
                        error_.ok() ? "" : absl::StrCat(" (", error_.message(), ")")));
  }
  if (!error_.ok()) return FreshCopy(error_);
  return absl::OkStatus();
}

bool TcpConnection::PopWritten(size_t frames) {
  bool close = false;
  for (size_t i = 0; i < frames; ++i) {
    if (out_.front().is_data) --pending_data_;
    close = close || out_.front().close_after;
    // Sealed buffers are kept for the next frames: a ring link queues tens of 1 MiB
    // frames at a time, and a fresh buffer per frame cost its page faults and zero-fill
    // (~10% of the CPU time of a sealed loopback allreduce).
    const size_t capacity = out_.front().owned.capacity();
    if (out_.front().recycle && spare_sealed_.size() < kSpareSealed &&
        spare_sealed_bytes_ + capacity <= kSpareSealedBytes) {
      spare_sealed_bytes_ += capacity;
      spare_sealed_.push_back(std::move(out_.front().owned));
    }
    out_.pop_front();
  }
  cv_.notify_all();
  return close;
}

}  // namespace rt::net
