// Durable POSIX file helpers for checkpoints: streaming writes with a running crc32c,
// fsync of files and directories, chunked verified reads, recursive removal.
//
// Every error is an absl::Status whose message names the path and the OS error
// (e.g. "write /ckpt/.tmp-step-00000010-42/params.bin: No space left on device
// (wrote 65536 of 1048576 bytes)"); the status code follows errno (ENOSPC ->
// ResourceExhausted, ENOENT -> NotFound, ...).
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace rt::ckpt {

// Bytes per write(2)/read(2) call and per crc update: large enough for full disk
// bandwidth, small enough that the chunk is still in cache when it is checksummed.
inline constexpr size_t kIoChunkBytes = 4u << 20;

// Creates `path` (must not exist), writes `data` in kIoChunkBytes chunks while
// computing its crc32c into *crc32c, fsyncs and closes it. On error the partial file
// is left for the caller to remove with its directory.
absl::Status WriteFileDurably(const std::string& path, absl::Span<const uint8_t> data,
                              uint32_t* crc32c);

// fsync(2) of a directory, so that entries created/renamed in it are durable.
absl::Status FsyncDirectory(const std::string& path);

// Reads exactly out.size() bytes of `path` into `out` and returns their crc32c. The
// file must have exactly that size (DataLoss "truncated: X of Y bytes" or "has X
// bytes, expected Y" otherwise).
absl::StatusOr<uint32_t> ReadFileExactly(const std::string& path, absl::Span<uint8_t> out);

// Reads out.size() bytes at byte `offset` of `path`, which must have exactly
// `file_bytes` bytes (DataLoss otherwise, or if the range lies outside them). No
// checksum: for a file whose crc32c was verified whole before (CrcOfFile).
absl::Status ReadFileRange(const std::string& path, uint64_t file_bytes, uint64_t offset,
                           absl::Span<uint8_t> out);

// Streams `path` (which must have exactly `expected_bytes`) in chunks and returns its
// crc32c; memory use is one chunk.
absl::StatusOr<uint32_t> CrcOfFile(const std::string& path, uint64_t expected_bytes);

// Whole small file (<= max_bytes) as a string. NotFound if it does not exist.
absl::StatusOr<std::string> ReadSmallFile(const std::string& path, size_t max_bytes);

// Size of a regular file; NotFound if missing, FailedPrecondition if not regular.
absl::StatusOr<uint64_t> RegularFileSize(const std::string& path);

// rm -r `path` (no error if it does not exist).
absl::Status RemoveTree(const std::string& path);

// Open file description locks (fcntl F_OFD_*) on a whole file: owned by the open file,
// not the process, so two descriptors of one process conflict as two processes do, and
// the kernel (or NFSv4's lock manager) releases them when the process dies.
// HoldReadLock takes a shared lock without waiting (false on error, errno set); it
// needs only a read-only descriptor, so a held lock never keeps a file open for
// writing (which would stop the file system from being remounted read-only).
// FileLockedByOthers tells whether another open file holds any lock on the file (true
// if it cannot tell).
bool HoldReadLock(int fd);
bool FileLockedByOthers(int fd);

// The status for a failed system call: code from errno, message "<what> <path>: <strerror>".
absl::Status ErrnoError(int errno_value, const std::string& what, const std::string& path);

}  // namespace rt::ckpt
