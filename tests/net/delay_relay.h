// DelayRelay: a test TCP relay that gives a loopback link a one-way delay, as a link
// between distant machines has. Each connection it accepts is forwarded to the target
// port, and every byte (and the close) reaches the other side `delay` after it left;
// the relay also connects to the target only `delay` after accepting, so the target
// accepts half a round trip after the dialer's connect returned, as over a real link
// (the dialer's handshake then ends half a round trip after the acceptor's). Peers
// reach each other through it with TcpNodeOptions::dial_via. No loss, no jitter.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace rt::net::testing {

class DelayRelay {
 public:
  // Listens on a free loopback port and forwards every connection to target_port.
  DelayRelay(uint16_t target_port, std::chrono::milliseconds delay)
      : target_port_(target_port), delay_(delay) {
    listen_fd_ = socket(AF_INET, SOCK_STREAM, 0);
    int one = 1;
    setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    sockaddr_in a = Loopback(0);
    bind(listen_fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a));
    socklen_t len = sizeof(a);
    getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&a), &len);
    port_ = ntohs(a.sin_port);
    listen(listen_fd_, 64);
    acceptor_ = std::thread([this] { AcceptLoop(); });
  }
  ~DelayRelay() {
    std::vector<std::shared_ptr<Line>> lines;
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopping_ = true;
      for (int fd : fds_) shutdown(fd, SHUT_RDWR);
      lines = lines_;
    }
    for (auto& line : lines) {
      std::lock_guard<std::mutex> l(line->mu);  // never held together with mu_
      line->cv.notify_all();
    }
    shutdown(listen_fd_, SHUT_RDWR);
    close(listen_fd_);
    acceptor_.join();
    // No new thread starts once stopping_ is set (under mu_).
    for (auto& t : threads_) t.join();
    for (int fd : fds_) close(fd);
  }
  DelayRelay(const DelayRelay&) = delete;
  DelayRelay& operator=(const DelayRelay&) = delete;

  std::string via() const { return "127.0.0.1:" + std::to_string(port_); }
  int connections() const { return connections_.load(); }

 private:
  using Clock = std::chrono::steady_clock;
  // One direction of one connection: chunks read from `from`, each written to `to`
  // when due; an empty chunk is the close.
  struct Line {
    int from = -1, to = -1;
    std::mutex mu;
    std::condition_variable cv;
    std::deque<std::pair<Clock::time_point, std::vector<uint8_t>>> chunks;
  };

  static sockaddr_in Loopback(uint16_t port) {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(port);
    return a;
  }

  // Starts `f` on a thread joined by the destructor; false (nothing started) once stopping.
  template <typename F>
  bool Spawn(F f) {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) return false;
    threads_.emplace_back(std::move(f));
    return true;
  }

  void AcceptLoop() {
    for (;;) {
      int in = accept(listen_fd_, nullptr, nullptr);
      if (in < 0) return;
      {
        std::lock_guard<std::mutex> lock(mu_);
        fds_.push_back(in);
      }
      if (!Spawn([this, in] { Connect(in); })) return;
    }
  }

  void Connect(int in) {
    std::this_thread::sleep_for(delay_);
    int out = socket(AF_INET, SOCK_STREAM, 0);
    {
      std::lock_guard<std::mutex> lock(mu_);
      fds_.push_back(out);
    }
    sockaddr_in a = Loopback(target_port_);
    if (connect(out, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
      shutdown(in, SHUT_RDWR);
      return;
    }
    ++connections_;
    for (auto [from, to] : {std::pair{in, out}, std::pair{out, in}}) {
      auto line = std::make_shared<Line>();
      line->from = from;
      line->to = to;
      {
        std::lock_guard<std::mutex> lock(mu_);
        lines_.push_back(line);
      }
      Spawn([this, line] { Read(*line); });
      Spawn([this, line] { Write(*line); });
    }
  }

  void Read(Line& line) {
    std::vector<uint8_t> buf(65536);
    for (;;) {
      ssize_t r = read(line.from, buf.data(), buf.size());
      std::lock_guard<std::mutex> lock(line.mu);
      line.chunks.emplace_back(
          Clock::now() + delay_,
          r > 0 ? std::vector<uint8_t>(buf.begin(), buf.begin() + r) : std::vector<uint8_t>());
      line.cv.notify_all();
      if (r <= 0) return;
    }
  }

  void Write(Line& line) {
    for (;;) {
      std::pair<Clock::time_point, std::vector<uint8_t>> chunk;
      {
        std::unique_lock<std::mutex> lock(line.mu);
        line.cv.wait(lock, [&] { return !line.chunks.empty() || stopping_.load(); });
        if (line.chunks.empty()) return;
        chunk = std::move(line.chunks.front());
        line.chunks.pop_front();
      }
      std::this_thread::sleep_until(chunk.first);
      const std::vector<uint8_t>& b = chunk.second;
      size_t done = 0;
      while (done < b.size()) {
        ssize_t w = send(line.to, b.data() + done, b.size() - done, MSG_NOSIGNAL);
        if (w <= 0) break;
        done += static_cast<size_t>(w);
      }
      if (b.empty() || done < b.size()) {
        // The close (or a failed write) reaches the other side: the whole connection ends.
        shutdown(line.to, SHUT_RDWR);
        shutdown(line.from, SHUT_RDWR);
        return;
      }
    }
  }

  uint16_t target_port_;
  std::chrono::milliseconds delay_;
  int listen_fd_ = -1;
  uint16_t port_ = 0;
  std::thread acceptor_;
  std::atomic<int> connections_{0};
  std::mutex mu_;                      // guards the members below
  std::atomic<bool> stopping_{false};  // set under mu_: no thread starts after
  std::vector<int> fds_;
  std::vector<std::thread> threads_;
  std::vector<std::shared_ptr<Line>> lines_;
};

}  // namespace rt::net::testing
