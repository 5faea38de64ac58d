// Small POSIX file helpers for the data layer: write-all with errno messages (a full
// disk is an error naming the file, never a short file), fsync of files and their
// directory, whole-file reads and `mkdir -p`. Used by shard, manifest and tokenizer
// writers so that "written" always means "on disk under its final name".
#pragma once

#include <cstddef>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace rt::data {

// Writes all `n` bytes to `fd` (retrying short writes and EINTR). `path` is only used
// in the error message, e.g. "write /d/train-00000.bin.tmp: No space left on device".
absl::Status WriteAll(int fd, const void* data, size_t n, const std::string& path);
// pwrite of all `n` bytes at `offset`.
absl::Status PwriteAll(int fd, const void* data, size_t n, uint64_t offset,
                       const std::string& path);
// fsync(fd) with an error naming `path`.
absl::Status SyncFd(int fd, const std::string& path);
// Makes the directory entry of `path` durable (fsync of its parent directory).
absl::Status SyncParentDir(const std::string& path);
// Creates `dir` and its missing parents; OK if it exists as a directory.
absl::Status MakeDirs(const std::string& dir);
// Reads the whole file; NotFound / PermissionDenied / Internal name the file.
absl::StatusOr<std::string> ReadWholeFile(const std::string& path);
// Writes `contents` to path + ".tmp", fsyncs, renames to `path`, fsyncs the directory.
absl::Status WriteFileAtomically(const std::string& path, absl::string_view contents);
// "open(2) errno" as text: strerror of errno mapped to an absl code naming `what`.
absl::Status ErrnoStatus(int err, const std::string& what);

}  // namespace rt::data
