// Durable POSIX file helpers for checkpoints (see file_io.h).
#include "ckpt/file_io.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <system_error>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/crc32c.h"

namespace rt::ckpt {
namespace {

// Closes an fd on scope exit unless released.
class FdCloser {
 public:
  explicit FdCloser(int fd) : fd_(fd) {}
  ~FdCloser() {
    if (fd_ >= 0) ::close(fd_);
  }
  FdCloser(const FdCloser&) = delete;
  FdCloser& operator=(const FdCloser&) = delete;
  // Closes now and reports the error (close can report deferred write errors).
  absl::Status Close(const std::string& path) {
    const int fd = fd_;
    fd_ = -1;
    if (::close(fd) != 0) return ErrnoError(errno, "close", path);
    return absl::OkStatus();
  }

 private:
  int fd_;
};

}  // namespace

absl::Status ErrnoError(int errno_value, const std::string& what, const std::string& path) {
  return absl::Status(absl::ErrnoToStatusCode(errno_value),
                      absl::StrCat(what, " ", path, ": ", std::strerror(errno_value)));
}

absl::Status WriteFileDurably(const std::string& path, absl::Span<const uint8_t> data,
                              uint32_t* crc32c) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) return ErrnoError(errno, "create", path);
  FdCloser closer(fd);
  uint32_t crc = 0;
  size_t done = 0;
  while (done < data.size()) {
    const size_t chunk = std::min(kIoChunkBytes, data.size() - done);
    crc = rt::Crc32cExtend(crc, data.data() + done, chunk);
    size_t written = 0;
    while (written < chunk) {
      const ssize_t n = ::write(fd, data.data() + done + written, chunk - written);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        // n == 0 should not happen for regular files; treat it as "no space".
        const int err = n < 0 ? errno : ENOSPC;
        absl::Status s = ErrnoError(err, "write", path);
        return absl::Status(s.code(), absl::StrFormat("%s (wrote %d of %d bytes)", s.message(),
                                                      done + written, data.size()));
      }
      written += static_cast<size_t>(n);
    }
    done += chunk;
  }
  if (::fsync(fd) != 0) return ErrnoError(errno, "fsync", path);
  if (absl::Status s = closer.Close(path); !s.ok()) return s;
  *crc32c = crc;
  return absl::OkStatus();
}

absl::Status FsyncDirectory(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return ErrnoError(errno, "open directory", path);
  FdCloser closer(fd);
  if (::fsync(fd) != 0) return ErrnoError(errno, "fsync directory", path);
  return closer.Close(path);
}

namespace {

// Opens `path` for reading and checks that it is a regular file of exactly
// `expected_bytes`. Returns the fd (caller closes).
absl::StatusOr<int> OpenForExactRead(const std::string& path, uint64_t expected_bytes) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return ErrnoError(errno, "open", path);
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    absl::Status s = ErrnoError(errno, "stat", path);
    ::close(fd);
    return s;
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return absl::DataLossError(absl::StrCat(path, " is not a regular file"));
  }
  const auto size = static_cast<uint64_t>(st.st_size);
  if (size != expected_bytes) {
    ::close(fd);
    if (size < expected_bytes) {
      return absl::DataLossError(
          absl::StrFormat("%s truncated: %d of %d bytes", path, size, expected_bytes));
    }
    return absl::DataLossError(
        absl::StrFormat("%s has %d bytes, expected %d", path, size, expected_bytes));
  }
  return fd;
}

// Reads exactly n bytes at the current position (DataLoss if the file ends early).
absl::Status ReadFull(int fd, const std::string& path, uint8_t* out, size_t n, uint64_t offset,
                      uint64_t expected_bytes) {
  size_t got = 0;
  while (got < n) {
    const ssize_t r = ::read(fd, out + got, n - got);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return ErrnoError(errno, "read", path);
    if (r == 0) {
      return absl::DataLossError(absl::StrFormat("%s truncated while reading: %d of %d bytes", path,
                                                 offset + got, expected_bytes));
    }
    got += static_cast<size_t>(r);
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<uint32_t> ReadFileExactly(const std::string& path, absl::Span<uint8_t> out) {
  auto fd_or = OpenForExactRead(path, out.size());
  if (!fd_or.ok()) return fd_or.status();
  FdCloser closer(*fd_or);
  uint32_t crc = 0;
  for (size_t done = 0; done < out.size();) {
    const size_t chunk = std::min(kIoChunkBytes, out.size() - done);
    if (absl::Status s = ReadFull(*fd_or, path, out.data() + done, chunk, done, out.size());
        !s.ok()) {
      return s;
    }
    crc = rt::Crc32cExtend(crc, out.data() + done, chunk);
    done += chunk;
  }
  return crc;
}

absl::Status ReadFileRange(const std::string& path, uint64_t file_bytes, uint64_t offset,
                           absl::Span<uint8_t> out) {
  if (offset > file_bytes || out.size() > file_bytes - offset) {
    return absl::DataLossError(absl::StrFormat("%s: bytes [%d, %d) lie outside its %d bytes", path,
                                               offset, offset + out.size(), file_bytes));
  }
  auto fd_or = OpenForExactRead(path, file_bytes);
  if (!fd_or.ok()) return fd_or.status();
  FdCloser closer(*fd_or);
  if (::lseek(*fd_or, static_cast<off_t>(offset), SEEK_SET) < 0) {
    return ErrnoError(errno, "seek", path);
  }
  return ReadFull(*fd_or, path, out.data(), out.size(), offset, file_bytes);
}

absl::StatusOr<uint32_t> CrcOfFile(const std::string& path, uint64_t expected_bytes) {
  auto fd_or = OpenForExactRead(path, expected_bytes);
  if (!fd_or.ok()) return fd_or.status();
  FdCloser closer(*fd_or);
  std::vector<uint8_t> buf(static_cast<size_t>(std::min<uint64_t>(kIoChunkBytes, expected_bytes)));
  uint32_t crc = 0;
  for (uint64_t done = 0; done < expected_bytes;) {
    const size_t chunk = static_cast<size_t>(std::min<uint64_t>(buf.size(), expected_bytes - done));
    if (absl::Status s = ReadFull(*fd_or, path, buf.data(), chunk, done, expected_bytes); !s.ok()) {
      return s;
    }
    crc = rt::Crc32cExtend(crc, buf.data(), chunk);
    done += chunk;
  }
  return crc;
}

absl::StatusOr<std::string> ReadSmallFile(const std::string& path, size_t max_bytes) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return ErrnoError(errno, "open", path);
  FdCloser closer(fd);
  struct stat st;
  if (::fstat(fd, &st) != 0) return ErrnoError(errno, "stat", path);
  if (!S_ISREG(st.st_mode))
    return absl::DataLossError(absl::StrCat(path, " is not a regular file"));
  if (static_cast<uint64_t>(st.st_size) > max_bytes) {
    return absl::DataLossError(
        absl::StrFormat("%s is too large (%d bytes, at most %d)", path, st.st_size, max_bytes));
  }
  std::string text(static_cast<size_t>(st.st_size), '\0');
  size_t got = 0;
  while (got < text.size()) {
    const ssize_t r = ::read(fd, text.data() + got, text.size() - got);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return ErrnoError(errno, "read", path);
    if (r == 0) break;  // shrank meanwhile: the decoder reports the truncation
    got += static_cast<size_t>(r);
  }
  text.resize(got);
  return text;
}

absl::StatusOr<uint64_t> RegularFileSize(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return ErrnoError(errno, "stat", path);
  if (!S_ISREG(st.st_mode)) {
    return absl::FailedPreconditionError(absl::StrCat(path, " is not a regular file"));
  }
  return static_cast<uint64_t>(st.st_size);
}

namespace {

struct flock WholeFileLock(short type) {
  struct flock fl = {};
  fl.l_type = type;
  fl.l_whence = SEEK_SET;
  fl.l_start = 0;
  fl.l_len = 0;
  return fl;
}

}  // namespace

bool HoldReadLock(int fd) {
  struct flock fl = WholeFileLock(F_RDLCK);
  return ::fcntl(fd, F_OFD_SETLK, &fl) == 0;
}

bool FileLockedByOthers(int fd) {
  // A write lock would conflict with any lock another open file holds.
  struct flock fl = WholeFileLock(F_WRLCK);
  if (::fcntl(fd, F_OFD_GETLK, &fl) != 0) return true;
  return fl.l_type != F_UNLCK;
}

absl::Status RemoveTree(const std::string& path) {
  std::error_code ec;
  std::filesystem::remove_all(path, ec);
  if (ec) return ErrnoError(ec.value(), "remove", path);
  return absl::OkStatus();
}

}  // namespace rt::ckpt
