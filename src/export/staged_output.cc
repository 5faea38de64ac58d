// Staged export outputs and the file sink (see header).
#include "export/staged_output.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <system_error>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "data/durable_file.h"

namespace rt::exporter {
namespace {

std::string ParentOf(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

std::string BaseOf(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

void RemoveQuietly(const std::string& path) {
  std::error_code ec;
  std::filesystem::remove_all(path, ec);
}

absl::Status FsyncPath(const std::string& path, bool directory) {
  const int fd = ::open(path.c_str(), (directory ? O_RDONLY | O_DIRECTORY : O_RDONLY) | O_CLOEXEC);
  if (fd < 0) return data::ErrnoStatus(errno, "open " + path);
  absl::Status st = data::SyncFd(fd, path);
  ::close(fd);
  return st;
}

// Names in `dir` that an export would not have written there (at most a few, sorted).
std::vector<std::string> ForeignEntries(const std::string& dir,
                                        const std::vector<std::string>& replaceable) {
  std::vector<std::string> foreign;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    const bool ours = std::find(replaceable.begin(), replaceable.end(), name) != replaceable.end();
    if (!ours || !entry.is_regular_file()) foreign.push_back(name);
  }
  if (ec) foreign.push_back(absl::StrCat("(cannot list: ", ec.message(), ")"));
  std::sort(foreign.begin(), foreign.end());
  if (foreign.size() > 3) foreign.resize(3);
  return foreign;
}

}  // namespace

absl::StatusOr<StagedOutput> StagedOutput::Begin(const std::string& path_in, Kind kind, bool force,
                                                 const std::vector<std::string>& replaceable) {
  if (path_in.empty()) return absl::InvalidArgumentError("--out PATH is required");
  std::string path = path_in;
  if (kind == Kind::kDirectory) {
    while (path.size() > 1 && path.back() == '/') path.pop_back();
  } else if (path.back() == '/') {
    return absl::InvalidArgumentError(
        absl::StrCat("--out ", path_in, " ends in '/': this format writes one file, e.g. ", path_in,
                     "model.gguf"));
  }
  const std::string parent = ParentOf(path), base = BaseOf(path);
  if (base == "." || base == "..") {
    return absl::InvalidArgumentError(absl::StrCat("--out ", path_in, " names no new entry"));
  }
  struct stat st;
  if (::stat(parent.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    return absl::NotFoundError(absl::StrCat("--out ", path_in, ": directory ", parent,
                                            " does not exist (create it first)"));
  }
  if (::access(parent.c_str(), W_OK | X_OK) != 0) {
    return absl::PermissionDeniedError(
        absl::StrCat("--out ", path_in, ": cannot write in ", parent, ": ", std::strerror(errno)));
  }
  if (::lstat(path.c_str(), &st) == 0) {
    const bool is_dir = S_ISDIR(st.st_mode);
    const char* what = kind == Kind::kFile ? "a file" : "a directory";
    if (!force) {
      return absl::AlreadyExistsError(
          absl::StrCat("--out ", path, " already exists (add --force to replace it)"));
    }
    if (kind == Kind::kFile && !S_ISREG(st.st_mode)) {
      return absl::AlreadyExistsError(absl::StrCat(
          "--out ", path, " exists and is not a regular file; --force replaces only ", what));
    }
    if (kind == Kind::kDirectory) {
      if (!is_dir) {
        return absl::AlreadyExistsError(absl::StrCat(
            "--out ", path, " exists and is not a directory; --force replaces only ", what));
      }
      std::vector<std::string> foreign = ForeignEntries(path, replaceable);
      if (!foreign.empty()) {
        return absl::AlreadyExistsError(absl::StrCat(
            "--out ", path, " holds files an export does not write (", absl::StrJoin(foreign, ", "),
            "); --force replaces only an earlier export: choose another --out"));
      }
    }
  }
  StagedOutput out;
  out.path_ = path;
  out.kind_ = kind;
  out.staging_ = absl::StrCat(parent, "/.", base, ".tmp-", ::getpid());
  RemoveQuietly(out.staging_);  // left by an earlier process with our pid: not ours to keep
  // Create the staging entry now: a directory where nothing may be created (a
  // read-only mount, /proc, ...) is found before any work, whoever we are (root
  // passes access(2) checks that the filesystem then refuses).
  if (kind == Kind::kDirectory) {
    if (::mkdir(out.staging_.c_str(), 0755) != 0) {
      return data::ErrnoStatus(errno,
                               absl::StrCat("--out ", path_in, ": cannot create ", out.staging_));
    }
  } else {
    const int fd = ::open(out.staging_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0) {
      return data::ErrnoStatus(errno,
                               absl::StrCat("--out ", path_in, ": cannot create ", out.staging_));
    }
    ::close(fd);
    ::unlink(out.staging_.c_str());
  }
  return out;
}

StagedOutput::StagedOutput(StagedOutput&& other) noexcept
    : path_(std::move(other.path_)),
      staging_(std::exchange(other.staging_, std::string())),
      kind_(other.kind_),
      committed_(other.committed_) {}

StagedOutput::~StagedOutput() {
  if (!committed_ && !staging_.empty()) RemoveQuietly(staging_);
}

absl::Status StagedOutput::Commit() {
  if (committed_) return absl::OkStatus();
  const bool directory = kind_ == Kind::kDirectory;
  // Files were fsynced by FileSink; the staged directory's entries need it too.
  if (directory) {
    absl::Status st = FsyncPath(staging_, true);
    if (!st.ok()) return st;
  }
  struct stat st;
  const bool replacing = ::lstat(path_.c_str(), &st) == 0;
  std::string aside;
  if (directory && replacing) {
    // rename(2) cannot replace a non-empty directory: move the old one aside first.
    aside = absl::StrCat(ParentOf(path_), "/.", BaseOf(path_), ".old-", ::getpid());
    RemoveQuietly(aside);
    if (::rename(path_.c_str(), aside.c_str()) != 0) {
      return data::ErrnoStatus(errno, absl::StrCat("rename ", path_, " to ", aside));
    }
  }
  if (::rename(staging_.c_str(), path_.c_str()) != 0) {
    absl::Status err = data::ErrnoStatus(errno, absl::StrCat("rename ", staging_, " to ", path_));
    if (!aside.empty()) ::rename(aside.c_str(), path_.c_str());  // put the old export back
    return err;
  }
  committed_ = true;
  if (!aside.empty()) RemoveQuietly(aside);
  return data::SyncParentDir(path_);
}

absl::StatusOr<FileSink> FileSink::Create(const std::string& path) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) return data::ErrnoStatus(errno, "create " + path);
  return FileSink(fd, path);
}

FileSink::FileSink(FileSink&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)), path_(std::move(other.path_)), written_(other.written_) {}

FileSink::~FileSink() {
  if (fd_ >= 0) ::close(fd_);
}

absl::Status FileSink::Append(absl::string_view bytes) {
  if (fd_ < 0) return absl::FailedPreconditionError("write " + path_ + ": file already closed");
  absl::Status st = data::WriteAll(fd_, bytes.data(), bytes.size(), path_);
  if (st.ok()) written_ += bytes.size();
  return st;
}

absl::Status FileSink::Finish() {
  if (fd_ < 0) return absl::FailedPreconditionError("close " + path_ + ": file already closed");
  absl::Status st = data::SyncFd(fd_, path_);
  if (::close(fd_) != 0 && st.ok()) st = data::ErrnoStatus(errno, "close " + path_);
  fd_ = -1;
  return st;
}

absl::Status WriteNewFile(const std::string& path, absl::string_view contents) {
  absl::StatusOr<FileSink> sink = FileSink::Create(path);
  if (!sink.ok()) return sink.status();
  absl::Status st = sink->Append(contents);
  if (!st.ok()) return st;
  return sink->Finish();
}

absl::StatusOr<uint64_t> FileBytes(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return data::ErrnoStatus(errno, "stat " + path);
  return static_cast<uint64_t>(st.st_size);
}

}  // namespace rt::exporter
