// Scratch directories of checkpoint writers: names, in-progress locks, sweeping what
// dead writers left (see scratch_dir.h).
#include "ckpt/scratch_dir.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <ctime>
#include <filesystem>
#include <random>
#include <system_error>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"
#include "ckpt/file_io.h"
#include "ckpt/manifest.h"
#include "core/log.h"

namespace rt::ckpt {
namespace {

namespace fs = std::filesystem;

// Seconds since `path` last changed (its mtime), or -1 if it cannot be stat'ed.
int64_t AgeSeconds(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return -1;
  return static_cast<int64_t>(std::time(nullptr)) - static_cast<int64_t>(st.st_mtime);
}

enum class Verdict { kInProgress, kAbandoned, kTooFresh };

// Whether the .tmp-* directory `dir` has a live writer (see the file comment).
Verdict JudgeTmpDir(const std::string& dir) {
  const std::string lock = dir + "/" + kScratchLockName;
  const int fd = ::open(lock.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) {
    const int64_t age = AgeSeconds(dir);
    return age >= kAbandonedAfterSeconds ? Verdict::kAbandoned : Verdict::kTooFresh;
  }
  const bool held = FileLockedByOthers(fd);
  ::close(fd);
  return held ? Verdict::kInProgress : Verdict::kAbandoned;
}

}  // namespace

std::string NewWriterTag() {
  char host[256] = {0};
  if (::gethostname(host, sizeof(host) - 1) != 0) host[0] = 0;
  std::string tag;
  for (const char* c = host; *c; ++c) {
    const bool ok = (*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') ||
                    (*c >= '0' && *c <= '9') || *c == '.';
    tag.push_back(ok ? *c : '_');
  }
  static thread_local std::mt19937 rng(std::random_device{}());
  return absl::StrFormat("%s-%d-%08x", tag.empty() ? "host" : tag, ::getpid(),
                         static_cast<uint32_t>(rng()));
}

int64_t StepOfScratchDir(absl::string_view name) {
  if (!absl::ConsumePrefix(&name, kTmpPrefix) && !absl::ConsumePrefix(&name, kOldPrefix)) {
    return -1;
  }
  const size_t dash = name.find('-', 5);  // the dash after "step-<digits>"
  if (dash == absl::string_view::npos) return -1;
  int64_t step = 0;
  if (!ParseStepDirName(name.substr(0, dash), &step)) return -1;
  return step;
}

absl::StatusOr<ScratchDir> ScratchDir::Create(const std::string& ckpt_dir,
                                              const std::string& final_name) {
  const std::string path = absl::StrCat(ckpt_dir, "/", kTmpPrefix, final_name, "-", NewWriterTag());
  if (::mkdir(path.c_str(), 0755) != 0) return ErrnoError(errno, "create directory", path);
  // The lock is taken on a file of another name, which is then renamed to .lock (the
  // lock follows the open file): a .lock a sweeper can see is always held. Created
  // under its final name, it existed unlocked for a moment, and a sweep running then
  // removed the directory of a live writer (tests/ckpt/shared_dir_test.cc).
  const std::string lock = path + "/" + kScratchLockName;
  const std::string unlocked = lock + "-new";
  const int fd = ::open(unlocked.c_str(), O_RDONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) {
    absl::Status s = ErrnoError(errno, "create", unlocked);
    (void)RemoveTree(path);
    return s;
  }
  if (!HoldReadLock(fd)) {
    absl::Status s = ErrnoError(errno, "lock", unlocked);
    ::close(fd);
    (void)RemoveTree(path);
    return s;
  }
  if (::rename(unlocked.c_str(), lock.c_str()) != 0) {
    absl::Status s = ErrnoError(errno, "rename", unlocked);
    ::close(fd);
    (void)RemoveTree(path);
    return s;
  }
  return ScratchDir(path, fd);
}

ScratchDir::ScratchDir(ScratchDir&& o) noexcept
    : path_(std::move(o.path_)), lock_fd_(o.lock_fd_), owned_(o.owned_) {
  o.lock_fd_ = -1;
  o.owned_ = false;
}

ScratchDir::~ScratchDir() {
  if (owned_) {
    if (absl::Status s = RemoveTree(path_); !s.ok()) {
      LogWarning("checkpoint: could not remove the unfinished %s (%s); a later write removes it",
                 path_, s.ToString());
    }
  }
  if (lock_fd_ >= 0) ::close(lock_fd_);
}

absl::Status ScratchDir::RemoveLockFile() {
  const std::string lock = path_ + "/" + kScratchLockName;
  if (::unlink(lock.c_str()) != 0 && errno != ENOENT) return ErrnoError(errno, "remove", lock);
  return absl::OkStatus();
}

int SweepAbandonedScratchDirs(const std::string& ckpt_dir) {
  std::vector<std::string> names;
  std::error_code ec;
  for (fs::directory_iterator it(ckpt_dir, ec), end; !ec && it != end; it.increment(ec)) {
    names.push_back(it->path().filename().string());
  }
  int removed = 0;
  for (const std::string& name : names) {
    if (StepOfScratchDir(name) < 0) continue;
    const std::string dir = ckpt_dir + "/" + name;
    Verdict v = Verdict::kTooFresh;
    if (absl::StartsWith(name, kTmpPrefix)) {
      v = JudgeTmpDir(dir);
    } else if (AgeSeconds(dir) >= kAbandonedAfterSeconds) {
      v = Verdict::kAbandoned;
    }
    if (v != Verdict::kAbandoned) continue;
    if (absl::Status s = RemoveTree(dir); !s.ok()) {
      LogWarning("checkpoint cleanup: %s", s.ToString());
      continue;
    }
    ++removed;
  }
  return removed;
}

}  // namespace rt::ckpt
