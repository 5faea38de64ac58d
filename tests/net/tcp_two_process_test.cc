// Two real processes on loopback: this test re-runs its own binary as rank 1 (with
// RT_NET_PEER_ROLE set), then both stream RT_NET_STREAM_MB MiB (default 512; 16
// under sanitizers) each way in 4 MiB messages with 4 in flight, the pattern of a
// pipelined ring allreduce. Checks integrity and reports GB/s per direction.
#include <doctest/doctest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "core/clock.h"
#include "core/crc32c.h"
#include "net/tcp_ring.h"
#include "net_test_util.h"

extern char** environ;

using namespace rt::net::testing;

namespace {

constexpr const char* kTestName = "tcp ring: two processes stream both ways";

size_t StreamBytes() {
  if (const char* mb = std::getenv("RT_NET_STREAM_MB")) return std::strtoull(mb, nullptr, 10) << 20;
#ifdef RINGTRAIN_SANITIZED
  return size_t{16} << 20;
#else
  return size_t{512} << 20;
#endif
}

// One peer's work: form the ring, stream, check the received bytes' crc against the
// sender's pattern. Returns "" or an error; *gbps gets the rate.
std::string RunPeer(const std::vector<rt::net::HostEntry>& hosts, int rank, double* gbps) {
  const size_t chunk = size_t{4} << 20, total = StreamBytes(), chunks = total / chunk;
  auto ring = rt::net::TcpRing::Create(RingOptions(hosts, rank, absl::Seconds(30)));
  if (!ring.ok()) return ring.status().ToString();
  auto fill = [&](int who, std::vector<uint8_t>* v) {
    v->resize(chunk);
    for (size_t i = 0; i < chunk; ++i)
      (*v)[i] = static_cast<uint8_t>((i * 2654435761u) >> (11 + who));
  };
  std::vector<uint8_t> mine, theirs, in;
  fill(rank, &mine);
  fill(1 - rank, &theirs);
  const uint32_t want_crc = rt::Crc32c(theirs.data(), theirs.size());
  // Start together: a small message each way.
  std::vector<uint8_t> hello = {1};
  if (!(*ring)->SendToNext(hello).ok() || !(*ring)->RecvFromPrev(&in, absl::Seconds(30)).ok() ||
      !(*ring)->WaitSendsDone(absl::Seconds(30)).ok()) {
    return "start barrier failed";
  }
  rt::Stopwatch watch;
  const size_t window = 4;
  size_t received = 0;
  auto recv_one = [&]() -> std::string {
    auto st = (*ring)->RecvFromPrev(&in, absl::Seconds(60));
    if (!st.ok()) return st.ToString();
    if (in.size() != chunk || rt::Crc32c(in.data(), in.size()) != want_crc) return "corrupt chunk";
    ++received;
    return "";
  };
  for (size_t c = 0; c < chunks; ++c) {
    // The same bytes go out again and again: like a ring allreduce that sends from
    // one buffer, only WaitSendsDone ensures the previous sends are done with them.
    auto st = (*ring)->SendToNext(mine);
    if (!st.ok()) return st.ToString();
    if (c + 1 >= window) {
      std::string e = recv_one();
      if (!e.empty()) return e;
    }
  }
  while (received < chunks) {
    std::string e = recv_one();
    if (!e.empty()) return e;
  }
  auto st = (*ring)->WaitSendsDone(absl::Seconds(60));
  if (!st.ok()) return st.ToString();
  *gbps = static_cast<double>(chunks * chunk) / watch.ElapsedSeconds() / 1e9;
  // End together, so neither side closes while the other still reads.
  if (!(*ring)->SendToNext(hello).ok() || !(*ring)->RecvFromPrev(&in, absl::Seconds(30)).ok() ||
      !(*ring)->WaitSendsDone(absl::Seconds(30)).ok()) {
    return "end barrier failed";
  }
  return "";
}

}  // namespace

TEST_CASE("tcp ring: two processes stream both ways") {
  if (const char* role = std::getenv("RT_NET_PEER_ROLE")) {
    // Child: rank 1, ports from the environment.
    std::vector<rt::net::HostEntry> hosts = LoopbackHosts(2);
    hosts[0].port = static_cast<uint16_t>(std::atoi(std::getenv("RT_NET_PORT0")));
    hosts[1].port = static_cast<uint16_t>(std::atoi(std::getenv("RT_NET_PORT1")));
    double gbps = 0;
    std::string err = RunPeer(hosts, std::atoi(role), &gbps);
    REQUIRE_MESSAGE(err.empty(), err);
    std::fprintf(stderr, "two-process stream, rank 1: %.2f GB/s per direction\n", gbps);
    return;
  }
  auto hosts = LoopbackHosts(2);
  char exe[4096] = {0};
  REQUIRE(readlink("/proc/self/exe", exe, sizeof(exe) - 1) > 0);
  std::vector<std::string> env_strings = {"RT_NET_PEER_ROLE=1",
                                          "RT_NET_PORT0=" + std::to_string(hosts[0].port),
                                          "RT_NET_PORT1=" + std::to_string(hosts[1].port)};
  for (char** e = environ; *e; ++e) env_strings.emplace_back(*e);
  std::vector<char*> envp;
  for (auto& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::string filter = std::string("--test-case=") + kTestName;
  std::vector<char*> argv = {exe, filter.data(), nullptr};
  pid_t child = 0;
  REQUIRE(posix_spawn(&child, exe, nullptr, nullptr, argv.data(), envp.data()) == 0);
  double gbps = 0;
  std::string err = RunPeer(hosts, 0, &gbps);
  // Reap the child, killing it if it outlives a generous bound.
  int status = 0;
  rt::Stopwatch wait;
  while (waitpid(child, &status, WNOHANG) == 0) {
    if (wait.ElapsedSeconds() > 60) {
      kill(child, SIGKILL);
      waitpid(child, &status, 0);
      break;
    }
    usleep(10000);
  }
  CHECK_MESSAGE(err.empty(), err);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  MESSAGE("two processes: " << gbps << " GB/s per direction (rank 0's view)");
  std::fprintf(stderr, "two-process stream, rank 0: %.2f GB/s per direction\n", gbps);
}
