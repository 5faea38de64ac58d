// Checkpoints built in steps (CheckpointBuilder): sections whose pieces arrive in any
// order give the very checkpoint WriteCheckpoint gives; bad names and ranges, lost
// pieces, I/O errors, a full disk and a stale writer fail the build, stickily, and leave
// nothing behind; a builder dropped before Commit leaves nothing either.
#include "ckpt/checkpoint_builder.h"

#include <doctest/doctest.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "ckpt/checkpoint.h"
#include "ckpt/pattern.h"
#include "ckpt/temp_dir.h"
#include "skip.h"
#include "small_tmpfs.h"

namespace rt::ckpt {
namespace {

namespace fs = std::filesystem;
using rt::testing::ReadFile;
using rt::testing::SmallTmpfs;
using rt::testing::TempDir;

using rt::ckpt::testing::Pattern;

CheckpointMeta Meta(int64_t step, uint64_t epoch) {
  CheckpointMeta m;
  m.step = step;
  m.epoch = epoch;
  m.fields["config"] = "layers=2 heads=2 dim=32 seq_len=16 vocab=64";
  m.fields["zero"] = "1";
  return m;
}

std::vector<std::string> Entries(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

bool Has(const absl::Status& s, const std::string& part) {
  return std::string(s.message()).find(part) != std::string::npos;
}

std::unique_ptr<CheckpointBuilder> MustBegin(const std::string& dir, const CheckpointMeta& meta) {
  auto b = CheckpointBuilder::Begin(dir, meta);
  REQUIRE_MESSAGE(b.ok(), b.status().ToString());
  return std::move(*b);
}

// One piece of a section as the network delivers it.
struct Piece {
  std::string name;
  uint64_t offset;
  size_t bytes;
};

// `bytes` cut into pieces of 1 byte to 512 KiB (the wire sends up to 4 MiB), shuffled,
// with one piece sent twice (overlapping writes of the same bytes are allowed).
std::vector<Piece> ShuffledPieces(const std::string& name, size_t bytes, std::mt19937* rng) {
  std::vector<Piece> pieces;
  for (size_t offset = 0; offset < bytes;) {
    const size_t n = std::min<size_t>(bytes - offset, 1 + (*rng)() % (512u << 10));
    pieces.push_back({name, offset, n});
    offset += n;
  }
  pieces.push_back(pieces[pieces.size() / 2]);
  std::shuffle(pieces.begin(), pieces.end(), *rng);
  return pieces;
}

// Every file of step directory `dir` with its bytes.
std::vector<std::pair<std::string, std::string>> Files(const std::string& dir) {
  std::vector<std::pair<std::string, std::string>> files;
  for (const std::string& name : Entries(dir)) files.emplace_back(name, ReadFile(dir + "/" + name));
  return files;
}

// The newest valid checkpoint of `dir` is step `step` and all its sections verify.
void CheckLatestIs(const std::string& dir, int64_t step) {
  std::vector<std::string> problems;
  auto c = OpenLatestValidCheckpoint(dir, &problems);
  REQUIRE_MESSAGE(c.ok(), c.status().ToString());
  CHECK(c->meta().step == step);
  CHECK(c->VerifyAllSections().ok());
  CHECK(problems.empty());
}

}  // namespace

TEST_CASE("pieces written in any order plus a section given whole: WriteCheckpoint's checkpoint") {
#ifdef RINGTRAIN_SANITIZED
  const size_t moment_bytes = (1u << 20) + 12;
#else
  const size_t moment_bytes = (5u << 20) + 12;  // crosses the 4 MiB chunk of the crc read-back
#endif
  const std::vector<uint8_t> params = Pattern(300000, 1);
  const std::vector<uint8_t> adam_m = Pattern(moment_bytes, 2);
  const std::vector<uint8_t> adam_v = Pattern(moment_bytes, 3);
  const std::vector<uint8_t> none;
  TempDir built_tmp, written_tmp;
  const std::string built = built_tmp / "ckpt";  // created by Begin
  const std::string written = written_tmp / "ckpt";

  // The ZeRO-1 leader: Begin, Add what it holds, Reserve the moments and write their
  // pieces as they arrive, on the thread that receives them.
  std::unique_ptr<CheckpointBuilder> b = MustBegin(built, Meta(12, 4));
  const std::string scratch = b->scratch_path();
  CHECK(scratch.rfind(built + "/.tmp-step-00000012-", 0) == 0);
  REQUIRE(b->Add("params", params).ok());
  REQUIRE(b->Reserve("adam_m", adam_m.size()).ok());
  REQUIRE(b->Reserve("adam_v", adam_v.size()).ok());
  REQUIRE(b->Reserve("empty", 0).ok());
  // A reserved file has its size and its space at once, and reads as zeros.
  struct stat st;
  REQUIRE(::stat((scratch + "/adam_m.bin").c_str(), &st) == 0);
  CHECK(static_cast<size_t>(st.st_size) == adam_m.size());
  CHECK(static_cast<uint64_t>(st.st_blocks) * 512 >= adam_m.size());
  CHECK(ReadFile(scratch + "/adam_v.bin") == std::string(adam_v.size(), '\0'));

  std::mt19937 rng(16);
  std::vector<Piece> pieces = ShuffledPieces("adam_m", adam_m.size(), &rng);
  for (const Piece& p : ShuffledPieces("adam_v", adam_v.size(), &rng)) pieces.push_back(p);
  std::shuffle(pieces.begin(), pieces.end(), rng);
  for (const Piece& p : pieces) {
    const uint8_t* src = (p.name == "adam_m" ? adam_m : adam_v).data() + p.offset;
    REQUIRE(b->WriteAt(p.name, p.offset, absl::MakeConstSpan(src, p.bytes)).ok());
  }
  // Nothing is visible to readers before Commit.
  CHECK(absl::IsNotFound(OpenLatestValidCheckpoint(built, nullptr).status()));

  // Then a writer thread adds the rest and commits.
  absl::Status committed;
  std::thread writer([&, b = std::move(b)] {
    committed = b->Add("tail", none);
    if (committed.ok()) committed = b->Commit(3);
  });
  writer.join();
  REQUIRE_MESSAGE(committed.ok(), committed.ToString());
  CHECK(Entries(built) == std::vector<std::string>{"step-00000012"});  // no scratch left

  REQUIRE(WriteCheckpoint(written, Meta(12, 4),
                          {{"params", params},
                           {"adam_m", adam_m},
                           {"adam_v", adam_v},
                           {"empty", none},
                           {"tail", none}},
                          3)
              .ok());
  // The same files with the same bytes, manifest included.
  CHECK(Files(built + "/step-00000012") == Files(written + "/step-00000012"));

  auto c = Checkpoint::Open(built + "/step-00000012");
  REQUIRE_MESSAGE(c.ok(), c.status().ToString());
  CHECK(c->VerifyAllSections().ok());
  CHECK(c->ReadSectionBytes("adam_m").value() == adam_m);
  CHECK(c->ReadSectionBytes("adam_v").value() == adam_v);
  CHECK(c->ReadSectionBytes("params").value() == params);
  CheckLatestIs(built, 12);
}

TEST_CASE("bad section names, duplicates and sizes are InvalidArgument and fail the builder") {
  TempDir tmp;
  const std::vector<uint8_t> bytes(8);
  struct Case {
    const char* what;
    std::function<absl::Status(CheckpointBuilder&)> call;
  };
  const std::vector<Case> cases = {
      {"Reserve of an invalid name", [](CheckpointBuilder& b) { return b.Reserve("../x", 8); }},
      {"Reserve of 'manifest'", [](CheckpointBuilder& b) { return b.Reserve("manifest", 8); }},
      {"Add of an invalid name", [&](CheckpointBuilder& b) { return b.Add(".hidden", bytes); }},
      {"Reserve of a name added",
       [&](CheckpointBuilder& b) {
         (void)b.Add("params", bytes);
         return b.Reserve("params", 8);
       }},
      {"Add of a name reserved",
       [&](CheckpointBuilder& b) {
         (void)b.Reserve("adam_m", 8);
         return b.Add("adam_m", bytes);
       }},
      {"Reserve twice",
       [](CheckpointBuilder& b) {
         (void)b.Reserve("adam_m", 8);
         return b.Reserve("adam_m", 8);
       }},
      {"Reserve of more than a file can hold",
       [](CheckpointBuilder& b) {
         return b.Reserve("adam_m", std::numeric_limits<uint64_t>::max());
       }},
  };
  for (const Case& c : cases) {
    CAPTURE(c.what);
    std::unique_ptr<CheckpointBuilder> b = MustBegin(tmp.path(), Meta(1, 0));
    const absl::Status s = c.call(*b);
    CHECK(absl::IsInvalidArgument(s));
    CHECK(Entries(tmp.path()).empty());  // the scratch directory went at once
    CHECK(b->Reserve("other", 8) == s);  // sticky: later calls do nothing
    CHECK(b->Commit(1) == s);
    CHECK(Entries(tmp.path()).empty());
  }
  // Begin validates the meta before touching the disk.
  CheckpointMeta no_key = Meta(1, 0);
  no_key.fields[""] = "x";
  CHECK(absl::IsInvalidArgument(CheckpointBuilder::Begin(tmp.path(), no_key).status()));
  CHECK(absl::IsInvalidArgument(CheckpointBuilder::Begin(tmp.path(), Meta(-1, 0)).status()));
  CHECK(absl::IsInvalidArgument(CheckpointBuilder::Begin("", Meta(1, 0)).status()));
  std::unique_ptr<CheckpointBuilder> b = MustBegin(tmp.path(), Meta(1, 0));
  CHECK(absl::IsInvalidArgument(b->Commit(-1)));
  CHECK(Entries(tmp.path()).empty());
}

TEST_CASE("WriteAt outside a reserved section or of an unknown one is InvalidArgument -- sticky") {
  TempDir tmp;
  REQUIRE(WriteCheckpoint(tmp.path(), Meta(1, 0), {{"params", Pattern(64, 1)}}, 0).ok());
  const std::vector<uint8_t> piece = Pattern(100, 2);
  const auto span = [&](size_t n) { return absl::MakeConstSpan(piece.data(), n); };
  struct Case {
    const char* what;
    std::string name;
    uint64_t offset;
    size_t bytes;
    const char* says;
  };
  const std::vector<Case> cases = {
      {"starts past the end", "adam_m", 1001, 0, "0 bytes at offset 1001"},
      {"ends past the end", "adam_m", 950, 100, "100 bytes at offset 950 do not fit"},
      {"offset overflows", "adam_m", std::numeric_limits<uint64_t>::max(), 2, "do not fit"},
      {"unknown section", "adam_x", 0, 10, "'adam_x' cannot be written at an offset"},
      {"a section given whole", "params", 0, 10, "given whole"},
  };
  for (const Case& c : cases) {
    CAPTURE(c.what);
    std::unique_ptr<CheckpointBuilder> b = MustBegin(tmp.path(), Meta(2, 0));
    REQUIRE(b->Reserve("adam_m", 1000).ok());
    REQUIRE(b->Add("params", piece).ok());
    REQUIRE(b->WriteAt("adam_m", 0, span(100)).ok());
    const absl::Status s = b->WriteAt(c.name, c.offset, span(c.bytes));
    CHECK(absl::IsInvalidArgument(s));
    CHECK_MESSAGE(Has(s, c.says), s.ToString());
    // The collective goes on delivering pieces: each is a no-op that returns the error.
    for (uint64_t offset = 100; offset < 1000; offset += 100) {
      CHECK(b->WriteAt("adam_m", offset, span(100)) == s);
    }
    CHECK(b->Commit(1) == s);
    CHECK(Entries(tmp.path()) == std::vector<std::string>{"step-00000001"});
  }
  CheckLatestIs(tmp.path(), 1);
}

TEST_CASE("a reserved byte never written (a lost piece) is refused at Commit") {
  TempDir tmp;
  const std::vector<uint8_t> piece = Pattern(400, 3);
  std::unique_ptr<CheckpointBuilder> b = MustBegin(tmp.path(), Meta(3, 1));
  REQUIRE(b->Reserve("adam_v", 1000).ok());
  REQUIRE(b->WriteAt("adam_v", 600, piece).ok());
  REQUIRE(b->WriteAt("adam_v", 0, piece).ok());
  const absl::Status s = b->Commit(1);
  CHECK(absl::IsFailedPrecondition(s));
  CHECK_MESSAGE(Has(s, "'adam_v': bytes [400, 600) of 1000 were never written"), s.ToString());
  CHECK(Entries(tmp.path()).empty());
}

TEST_CASE("a builder dropped before Commit leaves no step and no scratch directory") {
  TempDir tmp;
  REQUIRE(WriteCheckpoint(tmp.path(), Meta(1, 0), {{"params", Pattern(64, 1)}}, 0).ok());
  const std::vector<uint8_t> params = Pattern(4096, 4);
  std::string scratch;
  {
    std::unique_ptr<CheckpointBuilder> b = MustBegin(tmp.path(), Meta(2, 0));
    scratch = b->scratch_path();
    REQUIRE(b->Add("params", params).ok());
    REQUIRE(b->Reserve("adam_m", 4096).ok());
    CHECK(!b->WriteAt("adam_m", 1024, params).ok());  // does not fit: fails the builder
    CHECK(!fs::exists(scratch));
  }
  {
    std::unique_ptr<CheckpointBuilder> b = MustBegin(tmp.path(), Meta(2, 0));
    scratch = b->scratch_path();
    REQUIRE(b->Reserve("adam_m", 4096).ok());
    REQUIRE(b->WriteAt("adam_m", 0, absl::MakeConstSpan(params.data(), 2048)).ok());
    CHECK(fs::exists(scratch + "/adam_m.bin"));
  }
  CHECK(!fs::exists(scratch));
  CHECK(Entries(tmp.path()) == std::vector<std::string>{"step-00000001"});
  CheckLatestIs(tmp.path(), 1);
}

TEST_CASE("after Commit the builder refuses more work") {
  TempDir tmp;
  std::unique_ptr<CheckpointBuilder> b = MustBegin(tmp.path(), Meta(7, 0));
  REQUIRE(b->Reserve("adam_m", 4).ok());
  REQUIRE(b->WriteAt("adam_m", 0, Pattern(4, 7)).ok());
  REQUIRE(b->Commit(1).ok());
  CHECK(b->scratch_path().empty());
  CHECK(absl::IsFailedPrecondition(b->Commit(1)));
  const std::vector<uint8_t> more = Pattern(4, 8);
  CHECK(absl::IsFailedPrecondition(b->WriteAt("adam_m", 0, more)));
  CHECK(absl::IsFailedPrecondition(b->Add("more", more)));
  b.reset();  // a committed builder's destruction leaves its checkpoint
  CheckLatestIs(tmp.path(), 7);
  CHECK(Entries(tmp.path()) == std::vector<std::string>{"step-00000007"});
}

TEST_CASE("an I/O error in WriteAt names the file, is returned by every later call, frees all") {
  TempDir tmp;
  REQUIRE(WriteCheckpoint(tmp.path(), Meta(10, 1), {{"params", Pattern(4096, 10)}}, 1).ok());
  const std::vector<uint8_t> piece = Pattern(64 << 10, 5);
  std::unique_ptr<CheckpointBuilder> b = MustBegin(tmp.path(), Meta(20, 1));
  REQUIRE(b->Reserve("adam_m", 1 << 20).ok());
  REQUIRE(b->WriteAt("adam_m", 0, piece).ok());

  // RLIMIT_FSIZE makes pwrite(2) fail (EFBIG) past the limit, as EIO or a full disk on a
  // file system without fallocate would fail it. SIGXFSZ would kill the process.
  struct rlimit old_limit;
  REQUIRE(getrlimit(RLIMIT_FSIZE, &old_limit) == 0);
  auto old_handler = std::signal(SIGXFSZ, SIG_IGN);
  struct rlimit small = old_limit;
  small.rlim_cur = 128 * 1024;
  REQUIRE(setrlimit(RLIMIT_FSIZE, &small) == 0);
  const absl::Status s = b->WriteAt("adam_m", 512 << 10, piece);
  setrlimit(RLIMIT_FSIZE, &old_limit);
  std::signal(SIGXFSZ, old_handler);

  REQUIRE(!s.ok());
  CHECK_MESSAGE(Has(s, "write " + tmp.path() + "/.tmp-step-00000020-"), s.ToString());
  CHECK_MESSAGE(Has(s, "/adam_m.bin: "), s.ToString());
  CHECK_MESSAGE(Has(s, "of 65536 bytes at offset 524288"), s.ToString());
  CHECK(Entries(tmp.path()) == std::vector<std::string>{"step-00000010"});  // space freed now
  CHECK(b->WriteAt("adam_m", 65536, piece) == s);
  CHECK(b->Add("params", piece) == s);
  CHECK(b->Commit(1) == s);
  CHECK(Entries(tmp.path()) == std::vector<std::string>{"step-00000010"});
  CheckLatestIs(tmp.path(), 10);
}

TEST_CASE("a full disk fails Reserve or Commit with ResourceExhausted naming the file") {
  if (geteuid() != 0) {
    rt::testing::ReportSkip("full-disk builder test: needs root to mount a tmpfs");
    return;
  }
  TempDir tmp;
  const std::string dir = tmp / "disk";
  SmallTmpfs disk(dir, "1m");
  if (!disk.mounted()) {
    rt::testing::ReportSkip("full-disk builder test: mount tmpfs: " + disk.error());
    return;
  }
  REQUIRE(WriteCheckpoint(dir, Meta(10, 1), {{"params", Pattern(64 << 10, 10)}}, 1).ok());
  const std::vector<uint8_t> moment = Pattern(256 << 10, 11);
  const std::vector<uint8_t> big = Pattern(1 << 20, 12);
  absl::Status s;
  std::string file;

  SUBCASE("the space of a reserved section is taken at Reserve") {
    std::unique_ptr<CheckpointBuilder> b = MustBegin(dir, Meta(20, 1));
    REQUIRE(b->Reserve("adam_m", moment.size()).ok());
    s = b->Reserve("adam_v", 2 << 20);
    file = "/adam_v.bin";
    CHECK_MESSAGE(Has(s, "allocate " + dir + "/.tmp-step-00000020-"), s.ToString());
    CHECK(b->WriteAt("adam_m", 0, moment) == s);
    CHECK(b->Commit(1) == s);
  }
  SUBCASE("a section given whole that does not fit fails Commit") {
    std::unique_ptr<CheckpointBuilder> b = MustBegin(dir, Meta(20, 1));
    REQUIRE(b->Reserve("adam_m", moment.size()).ok());
    REQUIRE(b->WriteAt("adam_m", 0, moment).ok());
    REQUIRE(b->Add("params", big).ok());
    s = b->Commit(1);
    file = "/params.bin";
    CHECK_MESSAGE(Has(s, "write " + dir + "/.tmp-step-00000020-"), s.ToString());
  }
  CHECK(absl::IsResourceExhausted(s));
  CHECK_MESSAGE(Has(s, file), s.ToString());
  CHECK(Entries(dir) == std::vector<std::string>{"step-00000010"});
  CheckLatestIs(dir, 10);
  // The failed build gave its space back: one that fits goes through.
  const std::vector<uint8_t> params = Pattern(64 << 10, 20);  // alive until Commit returns
  std::unique_ptr<CheckpointBuilder> b = MustBegin(dir, Meta(20, 1));
  REQUIRE(b->Reserve("adam_m", moment.size()).ok());
  REQUIRE(b->WriteAt("adam_m", 0, moment).ok());
  REQUIRE(b->Add("params", params).ok());
  REQUIRE(b->Commit(1).ok());
  CHECK(Entries(dir) == std::vector<std::string>{"step-00000020"});
  CheckLatestIs(dir, 20);
}

TEST_CASE("a stale writer is refused at Begin, and at Commit if a newer one wrote meanwhile") {
  TempDir tmp;
  const std::vector<uint8_t> moment = Pattern(4096, 6);
  REQUIRE(WriteCheckpoint(tmp.path(), Meta(10, 1), {{"params", moment}}, 0).ok());
  CHECK(absl::IsAlreadyExists(CheckpointBuilder::Begin(tmp.path(), Meta(5, 1)).status()));
  CHECK(absl::IsFailedPrecondition(CheckpointBuilder::Begin(tmp.path(), Meta(20, 0)).status()));
  CHECK(Entries(tmp.path()) == std::vector<std::string>{"step-00000010"});

  // A paused leader of epoch 1 builds step 20 while the next view's leader (epoch 2)
  // writes step 15; a writer of the same epoch that ran ahead to step 30 likewise.
  struct Case {
    const char* what;
    CheckpointMeta newer;
    bool (*is_code)(const absl::Status&);
  };
  const std::vector<Case> cases = {
      {"a newer epoch", Meta(15, 2), absl::IsFailedPrecondition},
      {"a later step of the same epoch", Meta(30, 1), absl::IsAlreadyExists},
  };
  for (const Case& c : cases) {
    CAPTURE(c.what);
    TempDir dir;
    REQUIRE(WriteCheckpoint(dir.path(), Meta(10, 1), {{"params", moment}}, 0).ok());
    std::unique_ptr<CheckpointBuilder> b = MustBegin(dir.path(), Meta(20, 1));
    REQUIRE(b->Reserve("adam_m", moment.size()).ok());
    REQUIRE(b->WriteAt("adam_m", 0, moment).ok());
    // The other writer's sweep leaves the builder's locked scratch directory alone.
    REQUIRE(WriteCheckpoint(dir.path(), c.newer, {{"params", moment}}, 0).ok());
    REQUIRE(b->Add("params", moment).ok());
    const absl::Status s = b->Commit(0);
    CHECK_MESSAGE(c.is_code(s), s.ToString());
    CHECK_MESSAGE(Has(s, "step-000000" + std::to_string(c.newer.step)), s.ToString());
    CHECK(Entries(dir.path()) ==
          std::vector<std::string>{"step-00000010", "step-000000" + std::to_string(c.newer.step)});
    CheckLatestIs(dir.path(), c.newer.step);
  }
}

}  // namespace rt::ckpt
