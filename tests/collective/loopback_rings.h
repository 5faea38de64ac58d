// Rings of `n` peers on loopback, formed in threads, for the collective tests that run
// every peer in one process (the probe, the allreduce over TcpRing).
#pragma once

#include <doctest/doctest.h>

#include <memory>
#include <vector>

#include "../net/net_test_util.h"
#include "net/tcp_ring.h"

namespace rt::collective::testing {

// One ring per peer, in rank order; fails the calling test if any peer's ring fails.
inline std::vector<std::unique_ptr<net::TcpRing>> MakeRings(int n) {
  auto hosts = net::testing::LoopbackHosts(n);
  std::vector<net::TcpRingOptions> opts;
  for (int r = 0; r < n; ++r) opts.push_back(net::testing::RingOptions(hosts, r));
  std::vector<std::unique_ptr<net::TcpRing>> rings;
  for (auto& r : net::testing::FormRings(opts)) {
    INFO(r.status().ToString());
    REQUIRE(r.ok());
    rings.push_back(*std::move(r));
  }
  return rings;
}

}  // namespace rt::collective::testing
