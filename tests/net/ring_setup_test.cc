// JoinRing: from a hosts file and --rank to a working ring, and its errors.
#include "net/ring_setup.h"

#include <doctest/doctest.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>
#include <thread>

#include "core/log.h"
#include "net_test_util.h"

using namespace rt::net::testing;

namespace {

std::string WriteHostsFile(const std::vector<rt::net::HostEntry>& hosts) {
  std::string path = "/tmp/ringtrain_join_test_" + std::to_string(getpid()) + ".hosts";
  std::ofstream out(path);
  out << "# test ring\n";
  for (const auto& h : hosts) out << h.host << ":" << h.port << "\n";
  return path;
}

}  // namespace

TEST_CASE("join ring: hosts file + --rank forms a loopback ring without a secret") {
  auto hosts = LoopbackHosts(2);
  std::string path = WriteHostsFile(hosts);
  unsetenv("RINGTRAIN_SECRET");
  unsetenv("PSSH_NODENUM");
  auto results = EmptyResults(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      rt::net::RingSetup setup;
      setup.hosts_path = path;
      setup.rank = r;
      setup.wait = absl::Seconds(20);
      setup.fingerprint = {{"model", "m"}};
      results[r] = rt::net::JoinRing(setup);
    });
  }
  for (auto& t : threads) t.join();
  rt::SetLogRank(-1);
  std::remove(path.c_str());
  REQUIRE(results[0].ok());
  REQUIRE(results[1].ok());
  std::vector<uint8_t> msg = {9, 8, 7}, in;
  REQUIRE((*results[0])->SendToNext(msg).ok());
  REQUIRE((*results[1])->RecvFromPrev(&in, absl::Seconds(10)).ok());
  CHECK(in == msg);
  CHECK((*results[0])->WaitSendsDone(absl::Seconds(10)).ok());
}

TEST_CASE("join ring: a loopback ring without --rank is ambiguous") {
  auto hosts = LoopbackHosts(2);
  std::string path = WriteHostsFile(hosts);
  unsetenv("PSSH_NODENUM");
  rt::net::RingSetup setup;
  setup.hosts_path = path;
  setup.wait = absl::Seconds(1);
  auto ring = rt::net::JoinRing(setup);
  std::remove(path.c_str());
  REQUIRE_FALSE(ring.ok());
  CHECK(std::string(ring.status().message()).find("--rank") != std::string::npos);
}
