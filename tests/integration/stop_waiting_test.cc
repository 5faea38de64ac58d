// SIGTERM before training begins, with the real binary on loopback: a peer whose hosts
// file names a peer that never comes (a wrong hosts file) stops at once while it waits
// for the ring, writes no checkpoint and exits 0; a peer fetching --data stops at once
// whether no source answers or a file is half-way, and the checked bytes it kept are
// where the next fetch resumes. Each wait is long (--wait 120) so that only the signal
// can end it within the few seconds allowed.
#include <doctest/doctest.h>

#include <signal.h>

#include <chrono>
#include <filesystem>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "cli_runner.h"
#include "data/token_dataset.h"
#include "process_group.h"

namespace {

using rt::integration::ProcessGroup;
using rt::integration::ReadFile;
using rt::integration::RunResult;
using rt::integration::RunRingtrain;
using rt::integration::TempDir;

bool Contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

std::string WriteHosts(const TempDir& tmp, int base_port) {
  const std::string path = tmp / "hosts";
  rt::testing::WriteFile(path, "127.0.0.1:" + std::to_string(base_port) +
                                   "\n127.0.0.1:" + std::to_string(base_port + 1) + "\n");
  return path;
}

// Waits (at most 30 s) until `path` contains `text`; returns whether it did.
bool WaitForText(const std::string& path, const std::string& text) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (std::chrono::steady_clock::now() < deadline) {
    if (Contains(ReadFile(path), text)) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

// SIGTERM to process `index` of `group`; its result once it ended, and how many
// seconds that took (the wait is bounded by `timeout_s`).
RunResult TermAndWait(ProcessGroup& group, size_t index, int timeout_s, double* seconds) {
  const auto sent = std::chrono::steady_clock::now();
  group.Signal(index, SIGTERM);
  RunResult r = group.WaitAll(timeout_s)[index];
  *seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - sent).count();
  return r;
}

// The train flags of a tiny model.
std::vector<std::string> TrainArgs(const std::string& hosts, const std::string& data) {
  return {RINGTRAIN_BINARY,
          "train",
          "--hosts",
          hosts,
          "--rank=0",
          "--data",
          data,
          "--steps=5",
          "--layers=2",
          "--heads=2",
          "--dim=32",
          "--seq-len=16",
          "--batch=4",
          "--threads=1",
          "--precision=fp32",
          "--eval-every=0",
          "--probe-every=-1",
          "--wait=120",
          "--fetch-wait=120"};
}

// BYTES of the progress record DIR/.fetch/NAME.progress
// ("ringtrain-fetch-progress 1 NAME SIZE BYTES ..."), or 0 if there is none.
uint64_t RecordedBytes(const std::string& dir, const std::string& name, uint64_t* size) {
  std::istringstream in(ReadFile(dir + "/.fetch/" + name + ".progress"));
  std::string head, version, file;
  uint64_t bytes = 0;
  if (!(in >> head >> version >> file >> *size >> bytes)) return 0;
  return bytes;
}

}  // namespace

TEST_CASE("stop: SIGTERM while waiting for a peer that never comes exits at once, no checkpoint") {
  TempDir tmp;
  std::vector<uint32_t> train(6000), val(800);
  for (size_t i = 0; i < train.size(); ++i) train[i] = static_cast<uint32_t>((i * 7) % 50);
  for (size_t i = 0; i < val.size(); ++i) val[i] = static_cast<uint32_t>((i * 3) % 50);
  REQUIRE(
      rt::data::WriteTokenDataset(tmp / "data", 50, train, val, train.size() * 3, val.size() * 3)
          .ok());
  const int base = rt::integration::TestBasePort();
  ProcessGroup group(tmp.path());
  std::vector<std::string> args = TrainArgs(WriteHosts(tmp, base), tmp / "data");
  args.insert(args.end(), {"--ckpt-dir", tmp / "ckpt"});
  group.Start(args);
  REQUIRE(WaitForText(tmp / "proc0.err", "not training yet"));
  double seconds = 0;
  const RunResult r = TermAndWait(group, 0, 20, &seconds);
  INFO(r.err);
  CHECK_FALSE(r.timed_out);
  CHECK(seconds < 5);
  CHECK(r.exit_code == 0);
  CHECK(Contains(r.err, "stop requested while not in a training ring"));
  // Nothing was trained, so nothing is written: no step directory in --ckpt-dir.
  int step_dirs = 0;
  if (std::filesystem::exists(tmp / "ckpt")) {
    for (const auto& e : std::filesystem::directory_iterator(tmp / "ckpt")) {
      step_dirs += e.path().filename().string().rfind("step-", 0) == 0;
    }
  }
  CHECK(step_dirs == 0);
}

TEST_CASE("stop: SIGTERM while fetching --data exits at once -- the next fetch resumes") {
  TempDir tmp;
  // ~6 MB of train tokens, served at ~1 MiB per 150 ms (as data_fetch_test does).
  std::vector<uint32_t> train(3'000'000), val(100'000);
  for (size_t i = 0; i < train.size(); ++i) train[i] = static_cast<uint32_t>((i * 7919) % 5000);
  for (size_t i = 0; i < val.size(); ++i) val[i] = static_cast<uint32_t>((i * 31) % 5000);
  REQUIRE(rt::data::WriteTokenDataset(tmp / "held", 5000, train, val, 1, 1).ok());
  const int base = rt::integration::TestBasePort() + 10;
  const std::string hosts = WriteHosts(tmp, base);
  ProcessGroup group(tmp.path());

  // No source answers: rank 1 is not running yet.
  size_t fetcher = group.Start(TrainArgs(hosts, tmp / "new"));
  REQUIRE(WaitForText(tmp / "proc0.err", "data fetch into"));
  std::this_thread::sleep_for(std::chrono::milliseconds(500));  // inside a dial's wait
  double seconds = 0;
  RunResult r = TermAndWait(group, fetcher, 20, &seconds);
  {
    INFO(r.err);
    CHECK_FALSE(r.timed_out);
    CHECK(seconds < 3);
    CHECK(r.exit_code == 0);
    CHECK(Contains(r.err, "stopped by SIGTERM before training began"));
    CHECK(Contains(r.err, "nothing was written"));
    CHECK_FALSE(std::filesystem::exists(tmp / "new/manifest.txt"));
  }

  // A file half-way: rank 1 holds the data and serves it slowly.
  ProcessGroup holder(tmp.path() + "/h");
  std::filesystem::create_directories(tmp / "h");
  holder.Start({RINGTRAIN_BINARY, "fetch-data", "--hosts", hosts, "--rank=1", "--data",
                tmp / "held", "--fetch-wait=60"},
               {"RINGTRAIN_TEST_SERVE_PAUSE_MS=150"});
  ProcessGroup again(tmp.path() + "/a");
  std::filesystem::create_directories(tmp / "a");
  again.Start(TrainArgs(hosts, tmp / "new"));
  uint64_t size = 0, had = 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (std::chrono::steady_clock::now() < deadline &&
         RecordedBytes(tmp / "new", "train-00000.bin", &size) < (1u << 20)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  REQUIRE(RecordedBytes(tmp / "new", "train-00000.bin", &size) >= (1u << 20));
  r = TermAndWait(again, 0, 20, &seconds);
  had = RecordedBytes(tmp / "new", "train-00000.bin", &size);
  {
    INFO(r.err);
    CHECK_FALSE(r.timed_out);
    CHECK(seconds < 3);
    CHECK(r.exit_code == 0);
    CHECK(Contains(r.err, "stopped while fetching the data directory"));
    CHECK(Contains(r.err, "the next run resumes from them"));
    CHECK(had >= (1u << 20));
    CHECK(had < size);  // stopped half-way, not after the file
    CHECK_FALSE(std::filesystem::exists(tmp / "new/manifest.txt"));
  }
  // The next fetch starts at the recorded byte and completes.
  const RunResult rest = RunRingtrain({"fetch-data", "--hosts", hosts, "--rank=0", "--data",
                                       tmp / "new", "--fetch-wait=60", "--serve=false"},
                                      tmp.path(), 60);
  INFO(rest.err);
  CHECK(rest.exit_code == 0);
  CHECK(Contains(rest.err, "resuming at byte " + std::to_string(had)));
  CHECK(ReadFile(tmp / "new/train-00000.bin") == ReadFile(tmp / "held/train-00000.bin"));
  holder.KillAll();
}
