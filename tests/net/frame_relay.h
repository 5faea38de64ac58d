// FrameRelay: a test TCP relay between two peers that sees every byte (a capture) and
// can attack one frame of the dialer->acceptor stream: flip a byte, replay it, or
// inject a well-formed frame made without the keys before it. Peers reach each other
// through it with TcpNodeOptions::dial_via (or $RINGTRAIN_TEST_DIAL_VIA).
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "net/frame.h"

namespace rt::net::testing {

class FrameRelay {
 public:
  enum class Attack { kNone, kFlipByte, kReplay, kInject };

  // Listens on a free loopback port and forwards every connection to target_port.
  // The attack hits the first data frame with sequence >= at_sequence, once in the
  // relay's life (so that the re-formed link goes through unharmed). `sealed`: the
  // frames from kFirstSealedSequence on carry a tag.
  FrameRelay(uint16_t target_port, bool sealed, Attack attack, uint64_t at_sequence = 4)
      : target_port_(target_port), sealed_(sealed), attack_(attack), at_sequence_(at_sequence) {
    listen_fd_ = socket(AF_INET, SOCK_STREAM, 0);
    int one = 1;
    setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = 0;
    bind(listen_fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a));
    socklen_t len = sizeof(a);
    getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&a), &len);
    port_ = ntohs(a.sin_port);
    listen(listen_fd_, 64);
    acceptor_ = std::thread([this] { AcceptLoop(); });
  }
  ~FrameRelay() {
    stopping_ = true;
    shutdown(listen_fd_, SHUT_RDWR);
    close(listen_fd_);
    acceptor_.join();
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (int fd : fds_) shutdown(fd, SHUT_RDWR);
    }
    for (auto& t : pumps_) t.join();
    for (int fd : fds_) close(fd);
  }
  FrameRelay(const FrameRelay&) = delete;
  FrameRelay& operator=(const FrameRelay&) = delete;

  uint16_t port() const { return port_; }
  std::string via() const { return "127.0.0.1:" + std::to_string(port_); }
  int attacks() const { return attacks_.load(); }
  int connections() const { return connections_.load(); }
  // Every byte that went through, both directions.
  std::string Captured() const {
    std::lock_guard<std::mutex> lock(mu_);
    return capture_;
  }
  // Headers of the dialer->acceptor frames seen so far.
  std::vector<FrameHeader> Headers() const {
    std::lock_guard<std::mutex> lock(mu_);
    return headers_;
  }

 private:
  static bool ReadAll(int fd, uint8_t* p, size_t n) {
    while (n > 0) {
      ssize_t r = read(fd, p, n);
      if (r <= 0) return false;
      p += r;
      n -= static_cast<size_t>(r);
    }
    return true;
  }
  static bool WriteAll(int fd, const uint8_t* p, size_t n) {
    while (n > 0) {
      ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
      if (w <= 0) return false;
      p += w;
      n -= static_cast<size_t>(w);
    }
    return true;
  }
  template <typename T>
  static T Get(const uint8_t* in, size_t offset) {
    T v = 0;
    for (size_t i = 0; i < sizeof(T); ++i) v |= static_cast<T>(in[offset + i]) << (8 * i);
    return v;
  }

  void AcceptLoop() {
    while (!stopping_) {
      int in = accept(listen_fd_, nullptr, nullptr);
      if (in < 0) return;
      int out = socket(AF_INET, SOCK_STREAM, 0);
      sockaddr_in a{};
      a.sin_family = AF_INET;
      a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      a.sin_port = htons(target_port_);
      if (connect(out, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
        close(in);
        close(out);
        continue;
      }
      ++connections_;
      std::lock_guard<std::mutex> lock(mu_);
      fds_.push_back(in);
      fds_.push_back(out);
      pumps_.emplace_back([this, in, out] { PumpFrames(in, out); });
      pumps_.emplace_back([this, in, out] { PumpBytes(out, in); });
    }
  }

  void Record(const uint8_t* p, size_t n) {
    std::lock_guard<std::mutex> lock(mu_);
    capture_.append(reinterpret_cast<const char*>(p), n);
  }

  void PumpBytes(int from, int to) {
    uint8_t buf[65536];
    for (;;) {
      ssize_t r = read(from, buf, sizeof(buf));
      if (r <= 0 || !WriteAll(to, buf, static_cast<size_t>(r))) break;
      Record(buf, static_cast<size_t>(r));
    }
    shutdown(from, SHUT_RDWR);
    shutdown(to, SHUT_RDWR);
  }

  // The dialer's stream, frame by frame.
  void PumpFrames(int from, int to) {
    std::vector<uint8_t> frame;
    for (;;) {
      uint8_t header[kFrameHeaderBytes];
      if (!ReadAll(from, header, sizeof(header))) break;
      const uint64_t sequence = Get<uint64_t>(header, 24);
      const uint64_t payload = Get<uint64_t>(header, 32);
      const size_t trailer = sealed_ && sequence >= kFirstSealedSequence ? kFrameTagBytes : 0;
      if (payload > (uint64_t{1} << 30)) break;
      frame.assign(header, header + sizeof(header));
      frame.resize(sizeof(header) + payload + trailer);
      if (!ReadAll(from, frame.data() + sizeof(header), payload + trailer)) break;
      {
        std::lock_guard<std::mutex> lock(mu_);
        absl::StatusOr<FrameHeader> h = DecodeFrameHeader(header, UINT64_MAX, "relay");
        if (h.ok()) headers_.push_back(*h);
      }
      Record(frame.data(), frame.size());
      const bool hit = attack_ != Attack::kNone && header[6] == uint8_t(FrameType::kData) &&
                       sequence >= at_sequence_ && frame.size() > sizeof(header) &&
                       !attacked_.exchange(true);
      if (hit) ++attacks_;
      if (hit && attack_ == Attack::kFlipByte) frame[sizeof(header) + (frame.size() - 48) / 2] ^= 1;
      if (hit && attack_ == Attack::kInject) {
        // Same header (its sequence is the one the receiver expects), random bytes.
        std::vector<uint8_t> forged = frame;
        std::mt19937 rng(7);
        for (size_t i = sizeof(header); i < forged.size(); ++i) forged[i] = uint8_t(rng());
        if (!WriteAll(to, forged.data(), forged.size())) break;
      }
      if (!WriteAll(to, frame.data(), frame.size())) break;
      if (hit && attack_ == Attack::kReplay && !WriteAll(to, frame.data(), frame.size())) break;
    }
    shutdown(from, SHUT_RDWR);
    shutdown(to, SHUT_RDWR);
  }

  const uint16_t target_port_;
  const bool sealed_;
  const Attack attack_;
  const uint64_t at_sequence_;
  int listen_fd_ = -1;
  uint16_t port_ = 0;
  std::atomic<bool> stopping_{false};
  std::atomic<bool> attacked_{false};
  std::atomic<int> attacks_{0};
  std::atomic<int> connections_{0};
  std::thread acceptor_;
  mutable std::mutex mu_;
  std::vector<std::thread> pumps_;
  std::vector<int> fds_;
  std::string capture_;
  std::vector<FrameHeader> headers_;
};

}  // namespace rt::net::testing
