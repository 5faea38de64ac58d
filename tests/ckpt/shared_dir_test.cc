// Several writers in one checkpoint directory (NFS, a local ring, a forgotten
// --ckpt-shared): scratch directories in progress are never removed by another writer,
// writers of the same checkpoint end with one valid copy, and the markers of live peers
// tell who shares the directory.
#include <doctest/doctest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "ckpt/checkpoint.h"
#include "ckpt/peer_marker.h"
#include "ckpt/scratch_dir.h"
#include "ckpt/temp_dir.h"

namespace rt::ckpt {
namespace {

namespace fs = std::filesystem;
using rt::testing::TempDir;

std::vector<std::string> Entries(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

std::vector<uint8_t> Bytes(size_t n, uint8_t seed) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(i * 31 + seed);
  return v;
}

CheckpointMeta Meta(int64_t step, uint64_t epoch) {
  CheckpointMeta m;
  m.step = step;
  m.epoch = epoch;
  m.fields["run"] = "shared";
  return m;
}

}  // namespace

TEST_CASE(
    "a scratch directory in progress survives other writers -- once its writer is gone it is "
    "swept") {
  TempDir tmp;
  auto scratch = ScratchDir::Create(tmp.path(), "step-00000005");
  REQUIRE_MESSAGE(scratch.ok(), scratch.status().ToString());
  const std::string path = scratch->path();
  CHECK(fs::exists(path + "/.lock"));
  // Another writer (same or higher step) writes, sweeps and applies retention.
  const std::vector<uint8_t> b = Bytes(1000, 1);
  REQUIRE(WriteCheckpoint(tmp.path(), Meta(10, 1), {{"params", b}}, 1).ok());
  // The same epoch's later step is there: the older one adds nothing (CheckNotStale).
  CHECK(absl::IsAlreadyExists(WriteCheckpoint(tmp.path(), Meta(5, 1), {{"params", b}}, 1)));
  CHECK(SweepAbandonedScratchDirs(tmp.path()) == 0);
  CHECK(fs::exists(path));
  {
    // The writer dies: its lock is released, its directory stays behind.
    ScratchDir moved = std::move(*scratch);
    moved.Disown();
  }
  CHECK(fs::exists(path));
  CHECK(SweepAbandonedScratchDirs(tmp.path()) == 1);
  CHECK(!fs::exists(path));
  CHECK(Entries(tmp.path()) == std::vector<std::string>{"step-00000010"});
}

TEST_CASE(
    "an unpublished scratch directory is removed by its writer -- scratch names never repeat") {
  TempDir tmp;
  std::string path;
  {
    auto scratch = ScratchDir::Create(tmp.path(), "step-00000001");
    REQUIRE(scratch.ok());
    path = scratch->path();
    std::ofstream(path + "/params.bin") << "half";
  }
  CHECK(!fs::exists(path));
  CHECK(Entries(tmp.path()).empty());
  CHECK(NewWriterTag() != NewWriterTag());
  CHECK(StepOfScratchDir(".tmp-step-00000042-" + NewWriterTag()) == 42);
  CHECK(StepOfScratchDir(".old-step-00000007-host-1-00000000") == 7);
  CHECK(StepOfScratchDir("step-00000007") == -1);
  CHECK(StepOfScratchDir(".peer-127.0.0.1:29500") == -1);
}

TEST_CASE("a sweep running beside a writer never removes a scratch directory being created") {
  // The race CI found (two writers, one sweeping while the other created its scratch
  // directory): the .lock file existed for a moment before its lock was held, and a
  // sweep took that for a dead writer's. One thread creates scratch directories and
  // writes into each, another sweeps without pause.
  TempDir tmp;
  std::atomic<bool> done{false};
  std::atomic<int> sweeps{0};
  std::thread sweeper([&] {
    while (!done.load()) {
      SweepAbandonedScratchDirs(tmp.path());
      ++sweeps;
    }
  });
  int lost = 0;
  for (int i = 0; i < 3000; ++i) {
    auto scratch = ScratchDir::Create(tmp.path(), "step-00000001");
    if (!scratch.ok()) {
      ++lost;
      continue;
    }
    std::ofstream out(scratch->path() + "/params.bin");
    out << "x";
    out.close();
    if (!out.good() || !fs::exists(scratch->path() + "/params.bin")) ++lost;
  }
  done = true;
  sweeper.join();
  MESSAGE(sweeps.load(), " sweeps beside 3000 scratch directories");
  CHECK(sweeps.load() > 10);
  CHECK(lost == 0);
}

TEST_CASE("two writers of the same checkpoints in one directory: no error, one valid copy each") {
  TempDir tmp;
  // Leader and successor of a ring whose --ckpt-dir is shared: replicas are
  // bit-identical, so both write the same bytes at the same steps, at about the same
  // time; one that falls behind finds a later step of the same epoch (AlreadyExists).
  std::atomic<int> failures{0};
  std::vector<std::string> errors(2);
  auto writer = [&](int who) {
    for (int64_t step = 1; step <= 25; ++step) {
      const std::vector<uint8_t> params = Bytes(64 * 1024, static_cast<uint8_t>(step));
      absl::Status s = WriteCheckpoint(tmp.path(), Meta(step, 3), {{"params", params}}, 3);
      if (!s.ok() && !absl::IsAlreadyExists(s)) {
        ++failures;
        errors[who] = s.ToString();
      }
    }
  };
  std::thread a(writer, 0), b(writer, 1);
  a.join();
  b.join();
  CHECK_MESSAGE(failures.load() == 0, errors[0] << " | " << errors[1]);
  std::vector<std::string> steps;
  for (const std::string& name : Entries(tmp.path())) {
    CHECK_MESSAGE(name.rfind("step-", 0) == 0, "left behind: " << name);
    if (name.rfind("step-", 0) == 0) steps.push_back(name);
  }
  CHECK(steps.size() >= 3);
  CHECK(steps.back() == "step-00000025");
  for (const std::string& name : steps) {
    auto c = Checkpoint::Open(tmp / name);
    REQUIRE_MESSAGE(c.ok(), c.status().ToString());
    CHECK(c->VerifyAllSections().ok());
    CHECK(Entries(tmp / name) == std::vector<std::string>{"manifest.txt", "params.bin"});
  }
}

TEST_CASE("writing a checkpoint that another writer already published keeps that copy") {
  TempDir tmp;
  const std::vector<uint8_t> b = Bytes(4096, 7);
  REQUIRE(WriteCheckpoint(tmp.path(), Meta(8, 2), {{"params", b}}, 3).ok());
  struct stat st_before;
  REQUIRE(::stat((tmp / "step-00000008").c_str(), &st_before) == 0);
  REQUIRE(WriteCheckpoint(tmp.path(), Meta(8, 2), {{"params", b}}, 3).ok());
  struct stat st_after;
  REQUIRE(::stat((tmp / "step-00000008").c_str(), &st_after) == 0);
  CHECK(st_after.st_ino == st_before.st_ino);  // not replaced: the same directory
  CHECK(Entries(tmp.path()) == std::vector<std::string>{"step-00000008"});
  // Different bytes at the same (epoch, step) still replace it (as before).
  const std::vector<uint8_t> other = Bytes(4096, 9);
  REQUIRE(WriteCheckpoint(tmp.path(), Meta(8, 2), {{"params", other}}, 3).ok());
  auto c = Checkpoint::Open(tmp / "step-00000008");
  REQUIRE(c.ok());
  CHECK(c->ReadSectionBytes("params").value() == other);
}

TEST_CASE("peer markers: live peers of a directory are seen, dead ones are not") {
  TempDir tmp;
  const std::string dir = tmp / "ckpt";  // created by the first marker
  auto a = PeerMarker::Create(dir, "127.0.0.1:29500");
  REQUIRE_MESSAGE(a.ok(), a.status().ToString());
  CHECK((*a)->LiveOthers().empty());
  {
    auto b = PeerMarker::Create(dir, "[::1]:29501");
    REQUIRE(b.ok());
    CHECK((*a)->LiveOthers() == std::vector<std::string>{"[::1]:29501"});
    CHECK((*b)->LiveOthers() == std::vector<std::string>{"127.0.0.1:29500"});
    CHECK((*a)->IsLive("[::1]:29501"));
    CHECK(!(*a)->IsLive("127.0.0.1:29500"));  // itself
    // The same peer started twice on one directory is refused, naming it.
    auto twice = PeerMarker::Create(dir, "[::1]:29501");
    REQUIRE(!twice.ok());
    CHECK(absl::IsFailedPrecondition(twice.status()));
    CHECK(std::string(twice.status().message()).find("[::1]:29501") != std::string::npos);
  }
  CHECK((*a)->LiveOthers().empty());
  // A leftover marker (a peer that died, a directory copied from elsewhere) is not live.
  std::ofstream(dir + "/" + PeerMarkerFileName("10.0.0.9:29500")) << "ringtrain peer marker\n";
  CHECK(!(*a)->IsLive("10.0.0.9:29500"));
  CHECK((*a)->LiveOthers().empty());
  // Markers are neither checkpoints nor scratch directories.
  CHECK(absl::IsNotFound(OpenLatestValidCheckpoint(dir, nullptr).status()));
  const std::vector<uint8_t> b = Bytes(100, 1);
  REQUIRE(WriteCheckpoint(dir, Meta(1, 0), {{"params", b}}, 1).ok());
  CHECK(fs::exists(dir + "/" + PeerMarkerFileName("127.0.0.1:29500")));
}

TEST_CASE("peer marker names escape '/' and '%' and round-trip") {
  for (const std::string name : {"127.0.0.1:29500", "[2001:db8::1]:29501", "a/b%c", "host name"}) {
    const std::string file = PeerMarkerFileName(name);
    CHECK(file.rfind(".peer-", 0) == 0);
    CHECK(file.find('/') == std::string::npos);
    CHECK(PeerNameOfMarker(file) == name);
  }
  CHECK(PeerNameOfMarker("step-00000001").empty());
  CHECK(PeerNameOfMarker(".peer-%4").empty());
}

}  // namespace rt::ckpt
