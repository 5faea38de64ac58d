// Checkpoints on disk: round trip, detection of truncation / flipped bytes / missing
// or garbage manifests / missing sections with fallback to the previous checkpoint,
// retention, stale-writer refusal, temp-dir cleanup and write errors.
#include "ckpt/checkpoint.h"

#include <doctest/doctest.h>
#include <sys/resource.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "ckpt/pattern.h"
#include "ckpt/temp_dir.h"

namespace rt::ckpt {
namespace {

namespace fs = std::filesystem;
using rt::testing::TempDir;

using rt::ckpt::testing::Pattern;

CheckpointMeta Meta(int64_t step, uint64_t epoch) {
  CheckpointMeta m;
  m.step = step;
  m.epoch = epoch;
  m.fields["config"] = "layers=2 heads=2 dim=32 seq_len=16 vocab=64";
  m.fields["rng"] = std::string("\x00\xff\n %", 5);
  return m;
}

// Writes a checkpoint with a "params" section of `n` pattern bytes seeded by step.
absl::Status WriteSimple(const std::string& dir, int64_t step, uint64_t epoch, int keep,
                         size_t n = 4096) {
  const std::vector<uint8_t> params = Pattern(n, static_cast<uint32_t>(step));
  const std::vector<uint8_t> opt = Pattern(n / 2, static_cast<uint32_t>(step) + 1000);
  return WriteCheckpoint(dir, Meta(step, epoch), {{"params", params}, {"adam", opt}}, keep);
}

std::vector<std::string> Entries(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

bool Contains(const std::vector<std::string>& problems, const std::string& needle) {
  for (const std::string& p : problems) {
    if (p.find(needle) != std::string::npos) return true;
  }
  return false;
}

std::string JoinProblems(const std::vector<std::string>& problems) {
  std::string all;
  for (const std::string& p : problems) all += p + "\n";
  return all;
}

void FlipByte(const std::string& path, size_t offset) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  REQUIRE(f.good());
  f.seekg(static_cast<std::streamoff>(offset));
  char c = 0;
  f.read(&c, 1);
  c ^= 0x40;
  f.seekp(static_cast<std::streamoff>(offset));
  f.write(&c, 1);
}

}  // namespace

TEST_CASE("checkpoint round trip: meta, fields with any bytes, sections") {
  TempDir tmp;
  const std::string dir = tmp / "ckpt";  // created by the writer
  const std::vector<uint8_t> params = Pattern(100000, 1);
  const std::vector<uint8_t> empty;
  CheckpointMeta meta = Meta(42, 3);
  meta.fields["tokenizer"] = "/data/tok.model";
  meta.fields["weird key\t\x01"] = std::string(300, '\n');
  REQUIRE(WriteCheckpoint(dir, meta, {{"params", params}, {"empty", empty}}, 3).ok());
  CHECK(Entries(dir) == std::vector<std::string>{"step-00000042"});
  CHECK(Entries(dir + "/step-00000042") ==
        std::vector<std::string>{"empty.bin", "manifest.txt", "params.bin"});

  auto c = Checkpoint::Open(dir + "/step-00000042/");
  REQUIRE_MESSAGE(c.ok(), c.status().ToString());
  CHECK(c->path() == dir + "/step-00000042");
  CHECK(c->meta().step == 42);
  CHECK(c->meta().epoch == 3);
  CHECK(c->meta().fields == meta.fields);
  CHECK(c->HasSection("params"));
  CHECK(!c->HasSection("nope"));
  CHECK(c->SectionBytes("params") == params.size());
  CHECK(c->SectionBytes("empty") == 0);
  std::vector<uint8_t> out(params.size());
  REQUIRE(c->ReadSection("params", absl::MakeSpan(out)).ok());
  CHECK(out == params);
  CHECK(c->ReadSectionBytes("empty").value().empty());
  CHECK(absl::IsNotFound(c->ReadSection("nope", absl::MakeSpan(out))));
  std::vector<uint8_t> wrong(10);
  CHECK(absl::IsInvalidArgument(c->ReadSection("params", absl::MakeSpan(wrong))));
  CHECK(c->VerifyAllSections().ok());

  std::vector<std::string> problems;
  auto latest = OpenLatestValidCheckpoint(dir, &problems);
  REQUIRE(latest.ok());
  CHECK(latest->meta().step == 42);
  CHECK(problems.empty());
}

TEST_CASE("a large section round-trips (chunked write and read)") {
#ifdef RINGTRAIN_SANITIZED
  const size_t n = (8u << 20) + 123;
#else
  const size_t n = (48u << 20) + 123;  // crosses several 4 MiB I/O chunks
#endif
  TempDir tmp;
  std::vector<uint8_t> big = Pattern(n, 9);
  REQUIRE(WriteCheckpoint(tmp.path(), Meta(1, 0), {{"params", big}}, 1).ok());
  auto c = OpenLatestValidCheckpoint(tmp.path(), nullptr);
  REQUIRE(c.ok());
  std::vector<uint8_t> out(n);
  REQUIRE(c->ReadSection("params", absl::MakeSpan(out)).ok());
  CHECK(out == big);
}

TEST_CASE("corrupt newest checkpoint: detected, reported, previous one used") {
  TempDir tmp;
  const std::string dir = tmp.path();
  REQUIRE(WriteSimple(dir, 10, 1, 5).ok());
  REQUIRE(WriteSimple(dir, 20, 1, 5).ok());
  const std::string newest = dir + "/step-00000020";
  std::string expected_problem;

  SUBCASE("truncated section file") {
    fs::resize_file(newest + "/params.bin", 1000);
    expected_problem = "step-00000020: params.bin truncated: 1000 of 4096 bytes";
  }
  SUBCASE("section file longer than stated") {
    fs::resize_file(newest + "/adam.bin", 3000);
    expected_problem = "step-00000020: adam.bin has 3000 bytes, expected 2048";
  }
  SUBCASE("flipped byte in a section (same size)") {
    FlipByte(newest + "/params.bin", 777);
    expected_problem = "step-00000020: params.bin checksum mismatch";
  }
  SUBCASE("missing manifest") {
    fs::remove(newest + "/manifest.txt");
    expected_problem = "step-00000020: missing manifest.txt";
  }
  SUBCASE("garbage manifest") {
    std::ofstream(newest + "/manifest.txt", std::ios::trunc) << "\x7f"
                                                                "ELF garbage\n\x01\x02";
    expected_problem = "step-00000020: manifest.txt";
  }
  SUBCASE("flipped byte in the manifest") {
    FlipByte(newest + "/manifest.txt", 40);
    expected_problem = "step-00000020: manifest.txt";
  }
  SUBCASE("missing section file") {
    fs::remove(newest + "/adam.bin");
    expected_problem = "step-00000020: adam.bin missing";
  }
  SUBCASE("directory renamed to another step") {
    fs::rename(newest, dir + "/step-00000030");
    expected_problem = "step-00000030: directory name says step 30 but the manifest says step 20";
  }

  std::vector<std::string> problems;
  auto c = OpenLatestValidCheckpoint(dir, &problems);
  REQUIRE_MESSAGE(c.ok(), c.status().ToString());
  CHECK(c->meta().step == 10);
  std::vector<uint8_t> params(c->SectionBytes("params"));
  REQUIRE(c->ReadSection("params", absl::MakeSpan(params)).ok());
  CHECK(params == Pattern(4096, 10));
  CHECK_MESSAGE(Contains(problems, expected_problem), JoinProblems(problems));
  CHECK(problems.size() == 1);
}

TEST_CASE("corruption after Open is caught by ReadSection") {
  TempDir tmp;
  REQUIRE(WriteSimple(tmp.path(), 5, 0, 1).ok());
  auto c = Checkpoint::Open(tmp / "step-00000005");
  REQUIRE(c.ok());
  FlipByte(tmp / "step-00000005/params.bin", 0);
  std::vector<uint8_t> out(4096);
  absl::Status s = c->ReadSection("params", absl::MakeSpan(out));
  CHECK(absl::IsDataLoss(s));
  CHECK(std::string(s.message()).find("params.bin checksum mismatch") != std::string::npos);
  fs::resize_file(tmp / "step-00000005/params.bin", 10);
  s = c->ReadSection("params", absl::MakeSpan(out));
  CHECK(std::string(s.message()).find("params.bin truncated: 10 of 4096 bytes") !=
        std::string::npos);
  CHECK(!c->VerifyAllSections().ok());
}

TEST_CASE("no valid checkpoint: NotFound with the reasons") {
  TempDir tmp;
  std::vector<std::string> problems;
  CHECK(absl::IsNotFound(OpenLatestValidCheckpoint(tmp / "missing", &problems).status()));
  CHECK(absl::IsNotFound(OpenLatestValidCheckpoint(tmp.path(), &problems).status()));
  CHECK(problems.empty());
  REQUIRE(WriteSimple(tmp.path(), 3, 0, 2).ok());
  fs::resize_file(tmp / "step-00000003/params.bin", 0);
  auto c = OpenLatestValidCheckpoint(tmp.path(), &problems);
  CHECK(absl::IsNotFound(c.status()));
  CHECK(std::string(c.status().message()).find("no valid checkpoint") != std::string::npos);
  CHECK(Contains(problems, "step-00000003: params.bin truncated: 0 of 4096 bytes"));
}

TEST_CASE("a step directory can be given directly") {
  TempDir tmp;
  REQUIRE(WriteSimple(tmp.path(), 7, 0, 3).ok());
  REQUIRE(WriteSimple(tmp.path(), 8, 0, 3).ok());
  auto c = OpenLatestValidCheckpoint(tmp / "step-00000007", nullptr);
  REQUIRE(c.ok());
  CHECK(c->meta().step == 7);
  // A broken one given directly is an error, not a silent fallback.
  fs::remove(tmp / "step-00000007/params.bin");
  std::vector<std::string> problems;
  CHECK(!OpenLatestValidCheckpoint(tmp / "step-00000007", &problems).ok());
  CHECK(Contains(problems, "step-00000007: params.bin missing"));
}

TEST_CASE("newest is decided by (epoch, step)") {
  TempDir tmp;
  REQUIRE(WriteSimple(tmp.path(), 100, 2, 0).ok());
  // A later view (epoch 3) that redid steps may write a lower step number.
  REQUIRE(WriteSimple(tmp.path(), 95, 3, 0).ok());
  auto c = OpenLatestValidCheckpoint(tmp.path(), nullptr);
  REQUIRE(c.ok());
  CHECK(c->meta().epoch == 3);
  CHECK(c->meta().step == 95);
}

TEST_CASE("retention keeps the newest `keep` -- keep 0 keeps all") {
  TempDir tmp;
  for (int step = 1; step <= 5; ++step) REQUIRE(WriteSimple(tmp.path(), step * 10, 1, 2).ok());
  CHECK(Entries(tmp.path()) == std::vector<std::string>{"step-00000040", "step-00000050"});

  TempDir all;
  for (int step = 1; step <= 4; ++step) REQUIRE(WriteSimple(all.path(), step, 1, 0).ok());
  CHECK(Entries(all.path()).size() == 4);

  // Invalid step dirs older than the oldest kept one are removed too; newer are left
  // for inspection.
  TempDir mixed;
  REQUIRE(WriteSimple(mixed.path(), 10, 1, 1).ok());
  fs::create_directory(mixed / "step-00000005");  // empty: invalid, older
  fs::create_directory(mixed / "step-00000099");  // empty: invalid, newer
  REQUIRE(WriteSimple(mixed.path(), 20, 1, 1).ok());
  CHECK(Entries(mixed.path()) == std::vector<std::string>{"step-00000020", "step-00000099"});
  std::vector<std::string> problems;
  auto c = OpenLatestValidCheckpoint(mixed.path(), &problems);
  REQUIRE(c.ok());
  CHECK(c->meta().step == 20);
  CHECK(Contains(problems, "step-00000099: missing manifest.txt"));
}

TEST_CASE("a stale writer (older epoch or step) is refused and changes nothing") {
  TempDir tmp;
  REQUIRE(WriteSimple(tmp.path(), 50, 2, 5).ok());
  const auto before = Entries(tmp.path());

  absl::Status s = WriteSimple(tmp.path(), 60, 1, 5);  // old epoch, even with a higher step
  CHECK(absl::IsFailedPrecondition(s));
  CHECK(std::string(s.message()).find("stale") != std::string::npos);
  CHECK(std::string(s.message()).find("step-00000050") != std::string::npos);
  CHECK(absl::IsAlreadyExists(WriteSimple(tmp.path(), 40, 2, 5)));       // same epoch, behind
  CHECK(absl::IsFailedPrecondition(WriteSimple(tmp.path(), 50, 1, 5)));  // would replace newer
  CHECK(Entries(tmp.path()) == before);  // no temp dir left behind, nothing deleted
  auto c = OpenLatestValidCheckpoint(tmp.path(), nullptr);
  REQUIRE(c.ok());
  CHECK(c->meta().epoch == 2);
  CHECK(c->meta().step == 50);

  // The new epoch may write, even at a lower step.
  CHECK(WriteSimple(tmp.path(), 40, 3, 5).ok());
}

TEST_CASE("rewriting the same step with a newer or equal epoch replaces it") {
  TempDir tmp;
  REQUIRE(WriteSimple(tmp.path(), 10, 1, 3).ok());
  const std::vector<uint8_t> other = Pattern(64, 77);
  REQUIRE(WriteCheckpoint(tmp.path(), Meta(10, 2), {{"params", other}}, 3).ok());
  CHECK(Entries(tmp.path()) == std::vector<std::string>{"step-00000010"});
  auto c = OpenLatestValidCheckpoint(tmp.path(), nullptr);
  REQUIRE(c.ok());
  CHECK(c->meta().epoch == 2);
  CHECK(!c->HasSection("adam"));
  CHECK(c->ReadSectionBytes("params").value() == other);
  REQUIRE(WriteCheckpoint(tmp.path(), Meta(10, 2), {{"params", other}}, 3).ok());  // equal
  CHECK(Entries(tmp.path()) == std::vector<std::string>{"step-00000010"});
}

TEST_CASE("temp dirs of an interrupted write are ignored by readers and cleaned by writers") {
  TempDir tmp;
  REQUIRE(WriteSimple(tmp.path(), 20, 1, 5).ok());
  // A writer killed mid-write at step 30 left its scratch directory, with its lock file
  // (its lock died with it); a newer one at step 90 too. Both are abandoned, whatever
  // the step. A lock-less leftover of an older ringtrain is removed once unchanged for
  // kAbandonedAfterSeconds; a fresh lock-less one is left alone (see scratch_dir.h).
  for (const char* dead :
       {".tmp-step-00000030-host-99999-0000abcd", ".tmp-step-00000090-host-99998-0000abcd"}) {
    fs::create_directory(tmp / dead);
    std::ofstream(tmp / dead + "/params.bin") << "partial";
    std::ofstream(tmp / dead + "/.lock") << "";
  }
  fs::create_directory(tmp / ".tmp-step-00000010-99997");
  fs::create_directory(tmp / ".old-step-00000010-peer-b.example-99996");
  fs::create_directory(tmp / ".tmp-step-00000011-99995");
  const auto long_ago = fs::file_time_type::clock::now() - std::chrono::hours(1);
  fs::last_write_time(tmp / ".tmp-step-00000010-99997", long_ago);
  fs::last_write_time(tmp / ".old-step-00000010-peer-b.example-99996", long_ago);

  std::vector<std::string> problems;
  auto c = OpenLatestValidCheckpoint(tmp.path(), &problems);
  REQUIRE(c.ok());
  CHECK(c->meta().step == 20);
  CHECK(problems.empty());

  REQUIRE(WriteSimple(tmp.path(), 40, 1, 5).ok());
  CHECK(Entries(tmp.path()) ==
        std::vector<std::string>{".tmp-step-00000011-99995", "step-00000020", "step-00000040"});
}

TEST_CASE("a failing write (file size limit, like a full disk) leaves everything as it was") {
  TempDir tmp;
  REQUIRE(WriteSimple(tmp.path(), 10, 1, 1).ok());
  const auto before = Entries(tmp.path());

  // RLIMIT_FSIZE makes write(2) fail with EFBIG past the limit, exactly where a full
  // disk fails with ENOSPC. SIGXFSZ would kill the process: ignore it meanwhile.
  struct rlimit old_limit;
  REQUIRE(getrlimit(RLIMIT_FSIZE, &old_limit) == 0);
  auto old_handler = std::signal(SIGXFSZ, SIG_IGN);
  struct rlimit small = old_limit;
  small.rlim_cur = 64 * 1024;
  REQUIRE(setrlimit(RLIMIT_FSIZE, &small) == 0);
  const std::vector<uint8_t> big = Pattern(1 << 20, 3);
  absl::Status s = WriteCheckpoint(tmp.path(), Meta(20, 1), {{"params", big}}, 1);
  setrlimit(RLIMIT_FSIZE, &old_limit);
  std::signal(SIGXFSZ, old_handler);

  REQUIRE(!s.ok());
  const std::string msg(s.message());
  CHECK_MESSAGE(msg.find("write ") == 0, msg);
  CHECK_MESSAGE(msg.find("params.bin") != std::string::npos, msg);
  CHECK_MESSAGE(msg.find("of 1048576 bytes") != std::string::npos, msg);
  CHECK(Entries(tmp.path()) == before);  // temp dir removed, step 10 kept
  auto c = OpenLatestValidCheckpoint(tmp.path(), nullptr);
  REQUIRE(c.ok());
  CHECK(c->meta().step == 10);
}

TEST_CASE("invalid requests are refused before touching the disk") {
  TempDir tmp;
  const std::vector<uint8_t> b(4);
  CHECK(absl::IsInvalidArgument(WriteCheckpoint(tmp.path(), Meta(1, 0), {{"../x", b}}, 1)));
  CHECK(absl::IsInvalidArgument(WriteCheckpoint(tmp.path(), Meta(1, 0), {{"manifest", b}}, 1)));
  CHECK(absl::IsInvalidArgument(WriteCheckpoint(tmp.path(), Meta(1, 0), {{"a", b}, {"a", b}}, 1)));
  CHECK(absl::IsInvalidArgument(WriteCheckpoint(tmp.path(), Meta(-1, 0), {}, 1)));
  CHECK(absl::IsInvalidArgument(WriteCheckpoint(tmp.path(), Meta(1, 0), {}, -1)));
  CheckpointMeta m = Meta(1, 0);
  m.fields[""] = "x";
  CHECK(absl::IsInvalidArgument(WriteCheckpoint(tmp.path(), m, {}, 1)));
  CHECK(Entries(tmp.path()).empty());
  // An unwritable location is a clear error.
  std::ofstream(tmp / "file") << "x";
  absl::Status s = WriteCheckpoint(tmp / "file/sub", Meta(1, 0), {}, 1);
  CHECK(!s.ok());
  CHECK(std::string(s.message()).find(tmp / "file/sub") != std::string::npos);
}

}  // namespace rt::ckpt
