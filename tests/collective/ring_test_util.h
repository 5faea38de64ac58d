// Test helper: runs one function per peer of an in-process ring, each on its own
// thread, and returns every peer's status.
#pragma once

#include <functional>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "net/inproc_ring_transport.h"

namespace rt::collective::testing {

// zero_copy: the transport reads the sender's bytes only when the receiver takes
// them (strict buffer-lifetime check, see inproc_ring_transport.h).
inline std::vector<absl::Status> RunOnRing(
    int n, const std::function<absl::Status(net::RingTransport*)>& per_peer,
    bool zero_copy = false) {
  net::InProcessRingOptions options;
  options.zero_copy = zero_copy;
  auto ring = net::MakeInProcessRing(n, options);
  std::vector<absl::Status> status(n);
  std::vector<std::thread> threads;
  for (int p = 0; p < n; ++p) {
    threads.emplace_back([&, p] { status[p] = per_peer(ring[p].get()); });
  }
  for (auto& t : threads) t.join();
  return status;
}

}  // namespace rt::collective::testing
