// StagedOutput: a file or directory appears under its final name only on Commit, an
// existing one is kept without force, --force replaces only an earlier export, and
// nothing is left behind on failure (the staging entry is removed).
#include "export/staged_output.h"

#include <doctest/doctest.h>

#include <filesystem>

#include "export_test_util.h"

using rt::exporter::FileSink;
using rt::exporter::StagedOutput;
using rt::exporter::testing::ReadFile;
using rt::exporter::testing::TempDir;

namespace {

std::vector<std::string> Entries(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    names.push_back(e.path().filename().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

absl::Status Fill(const StagedOutput& out, const std::string& contents) {
  return rt::exporter::WriteNewFile(out.staging_path(), contents);
}

}  // namespace

TEST_CASE("a staged file appears only on Commit, an existing one needs --force") {
  TempDir dir;
  const std::string path = dir / "m.gguf";
  {
    absl::StatusOr<StagedOutput> out = StagedOutput::Begin(path, StagedOutput::Kind::kFile, false);
    REQUIRE(out.ok());
    REQUIRE(Fill(*out, "one").ok());
    CHECK(!std::filesystem::exists(path));
    REQUIRE(out->Commit().ok());
  }
  CHECK(ReadFile(path) == "one");
  CHECK(Entries(dir.path()) == std::vector<std::string>{"m.gguf"});

  absl::StatusOr<StagedOutput> again = StagedOutput::Begin(path, StagedOutput::Kind::kFile, false);
  REQUIRE(!again.ok());
  CHECK(again.status().code() == absl::StatusCode::kAlreadyExists);
  CHECK(std::string(again.status().message()) ==
        "--out " + path + " already exists (add --force to replace it)");
  {
    absl::StatusOr<StagedOutput> forced =
        StagedOutput::Begin(path, StagedOutput::Kind::kFile, true);
    REQUIRE(forced.ok());
    REQUIRE(Fill(*forced, "two").ok());
    CHECK(ReadFile(path) == "one");  // untouched until Commit
    REQUIRE(forced->Commit().ok());
  }
  CHECK(ReadFile(path) == "two");
  {  // abandoned (an error before Commit): nothing new is left, the old file stays
    absl::StatusOr<StagedOutput> lost = StagedOutput::Begin(path, StagedOutput::Kind::kFile, true);
    REQUIRE(lost.ok());
    REQUIRE(Fill(*lost, "three").ok());
  }
  CHECK(ReadFile(path) == "two");
  CHECK(Entries(dir.path()) == std::vector<std::string>{"m.gguf"});
}

TEST_CASE("--force replaces a directory only if it holds nothing but export files") {
  TempDir dir;
  const std::string path = dir / "hf";
  const std::vector<std::string> ours = {"model.safetensors", "config.json"};
  auto write_export = [&](const std::string& marker) {
    absl::StatusOr<StagedOutput> out =
        StagedOutput::Begin(path + "/", StagedOutput::Kind::kDirectory, true, ours);
    REQUIRE(out.ok());
    REQUIRE(rt::exporter::WriteNewFile(out->staging_path() + "/config.json", marker).ok());
    REQUIRE(out->Commit().ok());
  };
  write_export("first");
  write_export("second");  // replaces the earlier export
  CHECK(ReadFile(path + "/config.json") == "second");
  CHECK(Entries(dir.path()) == std::vector<std::string>{"hf"});

  rt::testing::WriteFile(path + "/my-notes.txt", "keep me");
  absl::StatusOr<StagedOutput> refused =
      StagedOutput::Begin(path, StagedOutput::Kind::kDirectory, true, ours);
  REQUIRE(!refused.ok());
  CHECK(std::string(refused.status().message())
            .find("holds files an export does not write "
                  "(my-notes.txt)") != std::string::npos);
  CHECK(ReadFile(path + "/my-notes.txt") == "keep me");
  CHECK(Entries(dir.path()) == std::vector<std::string>{"hf"});
}

TEST_CASE("bad output paths are refused before any work, naming the path") {
  TempDir dir;
  auto message = [](const absl::StatusOr<StagedOutput>& s) {
    return std::string(s.status().message());
  };
  auto no_parent = StagedOutput::Begin(dir / "missing/m.gguf", StagedOutput::Kind::kFile, false);
  CHECK(no_parent.status().code() == absl::StatusCode::kNotFound);
  CHECK(message(no_parent) == "--out " + (dir / "missing/m.gguf") + ": directory " +
                                  (dir / "missing") + " does not exist (create it first)");
  auto slash = StagedOutput::Begin(dir / "out/", StagedOutput::Kind::kFile, false);
  CHECK(slash.status().code() == absl::StatusCode::kInvalidArgument);
  rt::testing::WriteFile(dir / "file", "x");
  auto under_file = StagedOutput::Begin(dir / "file/m.gguf", StagedOutput::Kind::kFile, false);
  CHECK(under_file.status().code() == absl::StatusCode::kNotFound);
  std::filesystem::create_directory(dir / "adir");
  auto wrong_kind = StagedOutput::Begin(dir / "adir", StagedOutput::Kind::kFile, true);
  CHECK(wrong_kind.status().code() == absl::StatusCode::kAlreadyExists);
  CHECK(message(wrong_kind).find("is not a regular file") != std::string::npos);
  // A directory where nothing can be created, even by root.
  auto proc = StagedOutput::Begin("/proc/m.gguf", StagedOutput::Kind::kFile, false);
  CHECK(!proc.ok());
  CHECK(message(proc).find("--out /proc/m.gguf") != std::string::npos);
  CHECK(Entries(dir.path()) == std::vector<std::string>{"adir", "file"});
}

TEST_CASE("FileSink never overwrites and names the file in errors") {
  TempDir dir;
  rt::testing::WriteFile(dir / "exists", "x");
  absl::StatusOr<FileSink> sink = FileSink::Create(dir / "exists");
  REQUIRE(!sink.ok());
  CHECK(std::string(sink.status().message()).find("create " + (dir / "exists")) == 0);
  CHECK(ReadFile(dir / "exists") == "x");
  absl::StatusOr<FileSink> full = FileSink::Create("/dev/full");
  CHECK(!full.ok());  // exists: O_EXCL refuses it as well
}
