// Resumable partial files: a fetch cut off resumes at the recorded byte count after its
// bytes are re-checked; a damaged record, a changed size or bytes changed on disk start
// over; bytes written after the last record are dropped; Finish keeps only a file that
// matches the manifest, and starts over otherwise.
#include <doctest/doctest.h>

#include <sys/stat.h>

#include "fetch/data_files.h"
#include "fetch/partial_file.h"
#include "fetch_test_data.h"

namespace rt::fetch {
namespace {

using testing::ReadFile;
using testing::TempDir;
using testing::WriteFile;

std::unique_ptr<PartialFile> OpenPart(const std::string& dir, const std::string& name,
                                      uint64_t size, std::string* note) {
  absl::StatusOr<std::unique_ptr<PartialFile>> p = PartialFile::Open(dir, name, size, note);
  REQUIRE_MESSAGE(p.ok(), p.status().message());
  return *std::move(p);
}

absl::Span<const uint8_t> Span(const std::string& s, size_t from, size_t n) {
  return absl::MakeConstSpan(reinterpret_cast<const uint8_t*>(s.data()) + from, n);
}

}  // namespace

TEST_CASE("partial file: resumes where it stopped, finishes into the data directory") {
  TempDir src, dst;
  const data::DataManifest m = testing::WriteSmallDataDir(src.path(), 5000);
  const std::string name = "train-00001.bin";
  const std::string bytes = ReadFile(src / name);
  const std::vector<DataFile> files = ManifestFiles(m);
  REQUIRE(FindFile(files, name) != nullptr);
  REQUIRE(FindFile(files, name)->size == bytes.size());
  std::string note;
  {
    auto p = OpenPart(dst.path(), name, bytes.size(), &note);
    CHECK(note.empty());
    CHECK(p->bytes() == 0);
    REQUIRE(p->Append(Span(bytes, 0, 4000)).ok());
    REQUIRE(p->Append(Span(bytes, 4000, 1000)).ok());
    // Dies here (no Finish): the next run resumes.
  }
  auto p = OpenPart(dst.path(), name, bytes.size(), &note);
  CHECK(p->bytes() == 5000);
  CHECK(note.find("resuming at byte 5000") != std::string::npos);
  CHECK_FALSE(p->Append(Span(bytes, 0, bytes.size())).ok());  // would pass the size
  REQUIRE(p->Append(Span(bytes, 5000, bytes.size() - 5000)).ok());
  REQUIRE(p->Finish(m).ok());
  CHECK(ReadFile(dst / name) == bytes);
  struct stat st;
  CHECK(stat((dst / ".fetch/train-00001.bin.progress").c_str(), &st) != 0);
  CHECK(stat((dst / ".fetch/train-00001.bin.part").c_str(), &st) != 0);
}

TEST_CASE("partial file: bytes are trusted only as far as their recorded checksum") {
  TempDir src, dst;
  testing::WriteSmallDataDir(src.path(), 5000);
  const std::string name = "val-00000.bin";
  const std::string bytes = ReadFile(src / name);
  std::string note;
  {
    auto p = OpenPart(dst.path(), name, bytes.size(), &note);
    REQUIRE(p->Append(Span(bytes, 0, 3000)).ok());
  }
  const std::string part = dst / ".fetch/val-00000.bin.part";
  SUBCASE("bytes after the last record are dropped") {
    std::string longer = ReadFile(part) + "garbage written before the kill";
    WriteFile(part, longer);
    auto p = OpenPart(dst.path(), name, bytes.size(), &note);
    CHECK(p->bytes() == 3000);
    CHECK(ReadFile(part).size() == 3000);
  }
  SUBCASE("a changed byte on disk starts over") {
    std::string changed = ReadFile(part);
    changed[1234] ^= 0x40;
    WriteFile(part, changed);
    auto p = OpenPart(dst.path(), name, bytes.size(), &note);
    CHECK(p->bytes() == 0);
    CHECK(note.find("do not match their recorded checksum") != std::string::npos);
  }
  SUBCASE("a truncated part file starts over") {
    WriteFile(part, ReadFile(part).substr(0, 2000));
    auto p = OpenPart(dst.path(), name, bytes.size(), &note);
    CHECK(p->bytes() == 0);
  }
  SUBCASE("a damaged record starts over") {
    const std::string rec = dst / ".fetch/val-00000.bin.progress";
    std::string r = ReadFile(rec);
    r[r.find(" 3000 ") + 1] = '4';  // claims 4000 bytes; its own checksum no longer fits
    WriteFile(rec, r);
    auto p = OpenPart(dst.path(), name, bytes.size(), &note);
    CHECK(p->bytes() == 0);
    CHECK(note.find("damaged") != std::string::npos);
  }
  SUBCASE("another size starts over") {
    auto p = OpenPart(dst.path(), name, bytes.size() + 2, &note);
    CHECK(p->bytes() == 0);
    CHECK(note.find("starting over") != std::string::npos);
  }
}

TEST_CASE("partial file: a whole file that does not match the manifest is refused and restarted") {
  TempDir src, dst;
  const data::DataManifest m = testing::WriteSmallDataDir(src.path(), 5000);
  const std::string name = "train-00000.bin";
  std::string bytes = ReadFile(src / name);
  bytes[100] ^= 1;  // a token in the payload
  std::string note;
  auto p = OpenPart(dst.path(), name, bytes.size(), &note);
  REQUIRE(p->Append(Span(bytes, 0, bytes.size())).ok());
  absl::Status st = p->Finish(m);
  CHECK(absl::IsDataLoss(st));
  CHECK(std::string(st.message()).find("train-00000.bin") != std::string::npos);
  CHECK(p->bytes() == 0);
  struct stat sb;
  CHECK(stat((dst / name).c_str(), &sb) != 0);  // never under its final name

  // The tokenizer is checked by its CRC32C.
  const std::string tok = ReadFile(src / "tokenizer.model");
  CHECK(VerifyDataFile(m, "tokenizer.model", src / "tokenizer.model").ok());
  WriteFile(dst / "tok", tok + "x");
  CHECK(absl::IsDataLoss(VerifyDataFile(m, "tokenizer.model", dst / "tok")));
  CHECK_FALSE(VerifyDataFile(m, "unlisted.bin", src / "tokenizer.model").ok());
}

}  // namespace rt::fetch
