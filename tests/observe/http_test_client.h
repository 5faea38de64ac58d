// A blocking HTTP client for tests: raw requests over a loopback TCP socket, with
// timeouts, so tests can send what no browser sends (slow, huge, malformed).
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <string>

namespace rt::observe::testing {

// A connected socket to 127.0.0.1:port, or -1.
inline int ConnectLoopback(uint16_t port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return -1;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

inline bool SendAll(int fd, const std::string& bytes) {
  size_t sent = 0;
  while (sent < bytes.size()) {
    const ssize_t n = ::send(fd, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) return false;
    sent += static_cast<size_t>(n);
  }
  return true;
}

// Reads until the peer closes or `timeout_ms` passes; *closed says whether it closed.
inline std::string ReadUntilClosed(int fd, int timeout_ms, bool* closed = nullptr) {
  std::string out;
  const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  char buf[65536];
  if (closed) *closed = false;
  while (true) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                          end - std::chrono::steady_clock::now())
                          .count();
    if (left <= 0) return out;
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(left)) <= 0) continue;
    const ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) {
      if (closed) *closed = true;
      return out;
    }
    out.append(buf, static_cast<size_t>(n));
  }
}

// One request, the whole answer ("" if none within the timeout).
inline std::string Request(uint16_t port, const std::string& raw, int timeout_ms = 5000) {
  const int fd = ConnectLoopback(port);
  if (fd < 0) return "";
  std::string answer;
  if (SendAll(fd, raw)) answer = ReadUntilClosed(fd, timeout_ms);
  ::close(fd);
  return answer;
}

inline std::string Get(uint16_t port, const std::string& path) {
  return Request(port, "GET " + path + " HTTP/1.1\r\nHost: x\r\n\r\n");
}

// The body of an answer (after the blank line).
inline std::string Body(const std::string& answer) {
  const size_t at = answer.find("\r\n\r\n");
  return at == std::string::npos ? "" : answer.substr(at + 4);
}

}  // namespace rt::observe::testing
