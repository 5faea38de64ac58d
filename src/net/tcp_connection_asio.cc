// TcpConnection's Asio engine: frame reads and gather writes on the io thread. It runs
// the handshake, and afterwards every frame when LinkOptions::worker_threads is off;
// otherwise it hands the socket to the worker threads (tcp_connection_threads.cc) at
// the first frame boundary after Establish. The frames themselves come from and go
// to frame_codec.h.
#include "net/tcp_connection.h"

#include <asio/read.hpp>
#include <asio/write.hpp>

namespace rt::net {
namespace {

// Lets one async_write/async_read move up to 64 MiB per system call instead of
// Asio's default 64 KiB, so large messages stream with few wake-ups.
size_t LargeTransfer(const asio::error_code& ec, size_t) { return ec ? 0 : (size_t{64} << 20); }

}  // namespace

void TcpConnection::ReadHeader() {
  auto self = shared_from_this();
  asio::async_read(socket_, asio::buffer(header_bytes_, kFrameHeaderBytes),
                   [self](const asio::error_code& ec, size_t) { self->OnHeader(ec); });
}

void TcpConnection::OnHeader(const asio::error_code& ec) {
  if (ec) return FailFromReader(ErrorFromAsio(ec, "waiting for a frame"));
  if (!BeginFrame()) return;
  ContinueFrame();
}

void TcpConnection::ContinueFrame() {
  if (payload_received_ < read_len_) return ReadPayload();
  if (trailer_len_ > 0) return ReadTrailer();
  FinishFrame();
}

// Reads whatever has arrived straight into the message buffer and checks it (crc32c
// or decryption) while it is still in cache.
void TcpConnection::ReadPayload() {
  auto self = shared_from_this();
  uint8_t* dst = read_dst_ + payload_received_;
  size_t want = read_len_ - payload_received_;
  socket_.async_read_some(
      asio::buffer(dst, want), [self, dst](const asio::error_code& ec, size_t n) {
        if (ec) return self->FailOnIoThread(self->ErrorFromAsio(ec, "receiving a frame payload"));
        self->TakePayloadBytes(dst, n);
        self->ContinueFrame();
      });
}

void TcpConnection::ReadTrailer() {
  auto self = shared_from_this();
  asio::async_read(
      socket_, asio::buffer(in_.trailer(), trailer_len_),
      [self](const asio::error_code& ec, size_t) {
        if (ec) {
          return self->FailOnIoThread(self->ErrorFromAsio(ec, "receiving a frame's tag"));
        }
        self->FinishFrame();
      });
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

}  // namespace rt::net
