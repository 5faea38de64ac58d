// TcpConnection's worker-thread engine: once established, a reader and a writer
// thread of the connection own the socket and use blocking recv()/sendmsg() (see
// LinkOptions::worker_threads for why). They read and write the same frames as the
// Asio engine (frame_codec.h makes and checks them); errors go back to the io thread,
// which stops and joins them and closes the socket.
#include "net/tcp_connection.h"

#include <asio/post.hpp>

#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>

#include "core/status_copy.h"

namespace rt::net {

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
  info_fd_.store(fd);
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
  // The same frame logic as the io thread's (BeginFrame, FinishFrame), driven by a loop.
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
    if (!BeginFrame()) return;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!error_.ok()) return;
    }
    if (read_len_ > 0 && !ReadFully(read_dst_, read_len_, true, &error)) {
      std::lock_guard<std::mutex> lock(mu_);
      if (workers_stopping_) return;
    }
    if (!error.ok()) return FailFromWorker(error);
    if (trailer_len_ > 0 && !ReadFully(in_.trailer(), trailer_len_, false, &error)) {
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
