// Where an export is written: a file (GGUF) or a directory (Hugging Face), staged
// under a temporary name beside the final path and renamed into place only when
// complete, so PATH is never a partial export and an existing PATH is never lost.
//
// Begin() checks everything that can be checked before minutes of work: the parent
// directory exists and is writable, PATH does not exist (or `force` and it is of the
// same kind; a directory is replaced only if it holds nothing but files an export
// writes, so `--force` can never delete someone's folder), and the staging name is
// free. Writers put their bytes into staging_path() (with FileSink, fsynced); Commit()
// fsyncs the staged directory, renames it to PATH (a replaced directory is moved
// aside first, restored if the rename fails, removed after) and fsyncs the parent.
// If Commit() is never reached (an error, an exception) the destructor removes the
// staging path. A killed process leaves a hidden ".NAME.tmp-PID" beside PATH.
#pragma once

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace rt::exporter {

class StagedOutput {
 public:
  enum class Kind { kFile, kDirectory };

  // `replaceable` (directories only): the names an existing PATH may contain for
  // --force to replace it. Errors: InvalidArgument (empty path, a path ending in '/'
  // for a file), NotFound (no parent directory), PermissionDenied (not writable),
  // AlreadyExists (PATH exists without force, or is of the other kind, or holds other
  // files), each naming the path and what to do.
  static absl::StatusOr<StagedOutput> Begin(const std::string& path, Kind kind, bool force,
                                            const std::vector<std::string>& replaceable = {});

  StagedOutput(StagedOutput&& other) noexcept;
  StagedOutput& operator=(StagedOutput&&) = delete;
  StagedOutput(const StagedOutput&) = delete;
  StagedOutput& operator=(const StagedOutput&) = delete;
  ~StagedOutput();

  // The temporary file (kFile: not created yet) or directory (kDirectory: created).
  const std::string& staging_path() const { return staging_; }
  const std::string& final_path() const { return path_; }
  absl::Status Commit();

 private:
  StagedOutput() = default;
  std::string path_, staging_;
  Kind kind_ = Kind::kFile;
  bool committed_ = false;
};

// Sequential writes to a new file, with errors that name it ("write /m/x.gguf: No
// space left on device"; ENOSPC -> ResourceExhausted). Finish() fsyncs and closes;
// a FileSink destroyed before Finish() closes its file (the caller removes it).
class FileSink {
 public:
  static absl::StatusOr<FileSink> Create(const std::string& path);  // O_EXCL: never overwrites
  FileSink(FileSink&& other) noexcept;
  FileSink& operator=(FileSink&&) = delete;
  FileSink(const FileSink&) = delete;
  FileSink& operator=(const FileSink&) = delete;
  ~FileSink();

  absl::Status Append(absl::string_view bytes);
  absl::Status Finish();
  uint64_t bytes_written() const { return written_; }
  const std::string& path() const { return path_; }

 private:
  FileSink(int fd, std::string path) : fd_(fd), path_(std::move(path)) {}
  int fd_ = -1;
  std::string path_;
  uint64_t written_ = 0;
};

// Writes `contents` as a new file (FileSink: created, written, fsynced).
absl::Status WriteNewFile(const std::string& path, absl::string_view contents);

// Size of a file (for summaries); errors name the path.
absl::StatusOr<uint64_t> FileBytes(const std::string& path);

}  // namespace rt::exporter
