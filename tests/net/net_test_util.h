// Helpers for net tests: free loopback ports, loopback host lists, rings formed in threads.
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "net/tcp_ring.h"

namespace rt::net::testing {

// core/log.cc formats times in absl::LocalTimeZone(); its first load inside the
// (uninstrumented) libabsl_time_zone looks like a race to TSan when two threads log
// at once. Load it once at start-up, before any test starts threads.
inline const bool kTimeZoneLoaded = (absl::LocalTimeZone(), true);

// `n` distinct ports that were free a moment ago. Drawn at random below the kernel's
// ephemeral range (32768+), so outgoing connections of tests running in parallel
// never take them; a port another test holds fails bind() and is skipped.
inline std::vector<uint16_t> FreePorts(int n) {
  static std::mt19937 rng(
      static_cast<uint32_t>(getpid()) * 2654435761u ^
      static_cast<uint32_t>(std::chrono::steady_clock::now().time_since_epoch().count()));
  std::vector<int> fds;
  std::vector<uint16_t> ports;
  while (static_cast<int>(ports.size()) < n) {
    uint16_t port = static_cast<uint16_t>(20000 + rng() % 12000);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(port);
    if (bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
      close(fd);
      continue;
    }
    ports.push_back(port);
    fds.push_back(fd);
  }
  for (int fd : fds) close(fd);
  return ports;
}

inline std::vector<HostEntry> LoopbackHosts(int n) {
  std::vector<HostEntry> hosts;
  for (uint16_t port : FreePorts(n)) {
    HostEntry e;
    e.host = e.address = "127.0.0.1";
    e.port = port;
    e.is_loopback = true;
    e.line = static_cast<int>(hosts.size()) + 1;
    hosts.push_back(e);
  }
  return hosts;
}

inline TcpRingOptions RingOptions(const std::vector<HostEntry>& hosts, int rank,
                                  absl::Duration wait = absl::Seconds(20)) {
  TcpRingOptions o;
  o.node.hosts = hosts;
  o.node.self_rank = rank;
  o.node.secret = "test-secret-0123456789";
  o.node.fingerprint = {{"model", "layers=2 dim=8"}, {"data", "abc"}};
  o.node.handshake_timeout = absl::Seconds(5);
  o.wait = wait;
  o.log_every = absl::Seconds(1);
  return o;
}

inline std::vector<absl::StatusOr<std::unique_ptr<TcpRing>>> EmptyResults(size_t n) {
  std::vector<absl::StatusOr<std::unique_ptr<TcpRing>>> v;
  for (size_t i = 0; i < n; ++i) v.emplace_back(absl::UnknownError("not run"));
  return v;
}

// Creates one ring per option set, each in its own thread (as separate processes would).
inline std::vector<absl::StatusOr<std::unique_ptr<TcpRing>>> FormRings(
    const std::vector<TcpRingOptions>& options) {
  auto rings = EmptyResults(options.size());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < options.size(); ++i) {
    threads.emplace_back([&, i] { rings[i] = TcpRing::Create(options[i]); });
  }
  for (auto& t : threads) t.join();
  return rings;
}

inline std::string StatusText(const absl::Status& s) { return std::string(s.message()); }

#ifdef RINGTRAIN_SANITIZED
inline constexpr size_t kLargeMessage = 1 << 20;
#else
inline constexpr size_t kLargeMessage = 8 << 20;
#endif

// Message i from host rank r: size varies (0, small, large), bytes depend on (r, i, offset).
inline std::vector<uint8_t> MessageFrom(int r, int i) {
  static const size_t sizes[] = {0, 1, 48, 1000, 65537, kLargeMessage, 7, kLargeMessage / 3 + 5};
  std::vector<uint8_t> m(sizes[i % 8]);
  for (size_t k = 0; k < m.size(); ++k)
    m[k] = static_cast<uint8_t>(r * 31 + i * 7 + k * 13 + (k >> 9));
  return m;
}

}  // namespace rt::net::testing
