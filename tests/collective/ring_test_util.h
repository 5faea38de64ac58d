// Test helper: runs one function per peer of an in-process ring, each on its own
// thread, and returns every peer's status.
#pragma once

#include <functional>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "net/inproc_ring_transport.h"

namespace rt::collective::testing {

inline std::vector<absl::Status> RunOnRing(
    int n, const std::function<absl::Status(net::RingTransport*)>& per_peer) {
  auto ring = net::MakeInProcessRing(n);
  std::vector<absl::Status> status(n);
  std::vector<std::thread> threads;
  for (int p = 0; p < n; ++p) {
    threads.emplace_back([&, p] { status[p] = per_peer(ring[p].get()); });
  }
  for (auto& t : threads) t.join();
  return status;
}

}  // namespace rt::collective::testing
