// Data fetch between peers in one process, on loopback: three peers run the data phase
// at once, one holding the directory; the others end with byte-identical files, the
// last one relayed through the middle one. A source with a corrupt shard refuses it,
// naming it, and the shard comes from another peer. A fetch that finds a partial file
// resumes from it and fetches only the rest. With no source, a stop ends the wait at
// once and --wait's error says what is missing.
#include <doctest/doctest.h>

#include <sys/stat.h>

#include <chrono>
#include <filesystem>
#include <thread>

#include "../net/net_test_util.h"
#include "fetch/data_files.h"
#include "fetch/fetch_phase.h"
#include "fetch/partial_file.h"
#include "fetch_test_data.h"

namespace rt::fetch {
namespace {

using testing::ReadFile;
using testing::TempDir;
using testing::WriteFile;

FetchPhaseOptions Phase(const std::vector<net::HostEntry>& hosts, int rank,
                        const std::string& dir) {
  FetchPhaseOptions o;
  o.dir = dir;
  o.hosts = hosts;
  o.self_rank = rank;
  o.secret = "test-secret-0123456789";
  o.cluster_id = "fetch-test";
  o.wait = absl::Seconds(60);
  o.serve_until_all_complete = true;
  o.linger = absl::Milliseconds(500);
  return o;
}

// Runs the data phase of every peer in its own thread; returns their results.
std::vector<absl::Status> RunAll(const std::vector<FetchPhaseOptions>& peers,
                                 std::vector<FetchReport>* reports) {
  std::vector<absl::Status> results(peers.size());
  reports->assign(peers.size(), FetchReport{});
  std::vector<std::thread> threads;
  for (size_t i = 0; i < peers.size(); ++i) {
    threads.emplace_back([&, i] { results[i] = RunFetchPhase(peers[i], &(*reports)[i]); });
  }
  for (auto& t : threads) t.join();
  return results;
}

void CheckSameDir(const std::string& a, const std::string& b, const data::DataManifest& m) {
  CHECK(ReadFile(a + "/manifest.txt") == ReadFile(b + "/manifest.txt"));
  for (const DataFile& f : ManifestFiles(m)) {
    INFO(f.name);
    CHECK(ReadFile(a + "/" + f.name) == ReadFile(b + "/" + f.name));
    CHECK(VerifyDataFile(m, f.name, b + "/" + f.name).ok());
  }
  CHECK_FALSE(std::filesystem::exists(b + "/.fetch"));
}

uint64_t TotalBytes(const data::DataManifest& m, const std::string& dir) {
  uint64_t n = 0;
  for (const DataFile& f : ManifestFiles(m)) n += std::filesystem::file_size(dir + "/" + f.name);
  return n;
}

}  // namespace

TEST_CASE("fetch: two peers fetch from the one holding the data, the last through a relay") {
  TempDir tmp;
  const data::DataManifest m = testing::WriteSmallDataDir(tmp / "d0");
  const auto hosts = net::testing::LoopbackHosts(3);
  std::vector<FetchReport> reports;
  std::vector<absl::Status> r = RunAll(
      {Phase(hosts, 0, tmp / "d0"), Phase(hosts, 1, tmp / "d1"), Phase(hosts, 2, tmp / "d2")},
      &reports);
  for (size_t i = 0; i < r.size(); ++i) {
    INFO("peer ", i, ": ", r[i].message());
    CHECK(r[i].ok());
  }
  CheckSameDir(tmp / "d0", tmp / "d1", m);
  CheckSameDir(tmp / "d0", tmp / "d2", m);
  const uint64_t total = TotalBytes(m, tmp / "d0");
  CHECK(reports[0].bytes_fetched == 0);
  CHECK(reports[1].bytes_fetched == total);
  CHECK(reports[2].bytes_fetched == total);
  // Each pulls from its predecessor: peer 2's bytes came through peer 1.
  CHECK(reports[1].bytes_from[hosts[0].Endpoint()] == total);
  CHECK(reports[2].bytes_from[hosts[1].Endpoint()] == total);
  CHECK(reports[1].refusals.empty());
  CHECK(reports[2].refusals.empty());
}

TEST_CASE("fetch: a corrupt shard on the source is refused, named, and fetched from another peer") {
  TempDir tmp;
  const data::DataManifest m = testing::WriteSmallDataDir(tmp / "good");
  std::filesystem::copy(tmp / "good", tmp / "bad");
  std::string shard = ReadFile(tmp / "bad/train-00001.bin");
  shard[shard.size() / 2] ^= 0x01;  // still a valid token, wrong checksum
  WriteFile(tmp / "bad/train-00001.bin", shard);
  const auto hosts = net::testing::LoopbackHosts(3);
  // Peer 1's nearest source is peer 0, the corrupt one.
  std::vector<FetchReport> reports;
  std::vector<absl::Status> r = RunAll(
      {Phase(hosts, 0, tmp / "bad"), Phase(hosts, 1, tmp / "new"), Phase(hosts, 2, tmp / "good")},
      &reports);
  CHECK(r[1].ok());
  CheckSameDir(tmp / "good", tmp / "new", m);
  REQUIRE(reports[1].refusals.size() == 1);
  const std::string& why = reports[1].refusals[0];
  CHECK(why.find("train-00001.bin") != std::string::npos);
  CHECK(why.find(hosts[0].Endpoint()) != std::string::npos);
  CHECK(why.find("corrupt") != std::string::npos);
  CHECK(reports[1].bytes_from[hosts[2].Endpoint()] ==
        std::filesystem::file_size(tmp / "good/train-00001.bin"));
}

TEST_CASE("fetch: a partial fetch resumes and does not fetch again what it had") {
  TempDir tmp;
  const data::DataManifest m = testing::WriteSmallDataDir(tmp / "d0");
  // What a fetch killed mid-way leaves: the manifest in .fetch, the tokenizer and the
  // first train shard whole, half of the second shard with its progress record.
  REQUIRE(data::MakeDirs(tmp / "d1/.fetch").ok());
  WriteFile(tmp / "d1/.fetch/manifest.txt", ReadFile(tmp / "d0/manifest.txt"));
  std::filesystem::copy(tmp / "d0/tokenizer.model", tmp / "d1/tokenizer.model");
  std::filesystem::copy(tmp / "d0/train-00000.bin", tmp / "d1/train-00000.bin");
  const std::string shard = ReadFile(tmp / "d0/train-00001.bin");
  const size_t half = shard.size() / 2;
  {
    std::string note;
    auto p = PartialFile::Open(tmp / "d1", "train-00001.bin", shard.size(), &note);
    REQUIRE(p.ok());
    REQUIRE((*p)->Append(absl::MakeConstSpan(reinterpret_cast<const uint8_t*>(shard.data()), half))
                .ok());
  }
  const auto hosts = net::testing::LoopbackHosts(2);
  std::vector<FetchReport> reports;
  std::vector<absl::Status> r =
      RunAll({Phase(hosts, 0, tmp / "d0"), Phase(hosts, 1, tmp / "d1")}, &reports);
  CHECK(r[0].ok());
  CHECK(r[1].ok());
  CheckSameDir(tmp / "d0", tmp / "d1", m);
  const uint64_t rest =
      (shard.size() - half) + std::filesystem::file_size(tmp / "d0/val-00000.bin");
  CHECK(reports[1].bytes_fetched == rest);
  CHECK(reports[1].files_fetched == 2);
}

TEST_CASE("fetch: with no source, a stop ends the wait at once -- --wait names what is missing") {
  TempDir tmp;
  const auto hosts = net::testing::LoopbackHosts(2);  // rank 0 never runs
  FetchPhaseOptions o = Phase(hosts, 1, tmp / "d1");
  o.serve_until_all_complete = false;
  const auto start = std::chrono::steady_clock::now();
  o.stop = [start] {
    return std::chrono::steady_clock::now() - start > std::chrono::milliseconds(300);
  };
  FetchReport report;
  absl::Status st = RunFetchPhase(o, &report);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  INFO(st.message());
  CHECK(absl::IsCancelled(st));
  CHECK(seconds < 1.0);  // the dial's own wait is 4 s, --wait 60 s
  CHECK(std::string(st.message()).find("nothing was written") != std::string::npos);
  CHECK_FALSE(std::filesystem::exists(tmp / "d1/manifest.txt"));

  o.stop = nullptr;
  o.wait = absl::Seconds(1);
  st = RunFetchPhase(o, &report);
  INFO(st.message());
  CHECK(absl::IsDeadlineExceeded(st));
  CHECK(std::string(st.message()).find("no peer sent its manifest") != std::string::npos);
  CHECK(std::string(st.message()).find(hosts[0].Endpoint()) != std::string::npos);
}

}  // namespace rt::fetch
