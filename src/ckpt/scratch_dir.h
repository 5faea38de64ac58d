// Scratch directories of checkpoint writers: how several writers in one --ckpt-dir (a
// shared NFS directory, a local ring on one machine, a forgotten --ckpt-shared) stay out
// of each other's way, and how what dead writers left behind is found and removed.
//
// NAMES. A write goes into <ckpt_dir>/.tmp-step-<step>-<tag>/; a checkpoint that is
// replaced or deleted is first renamed to <ckpt_dir>/.old-step-<step>-<tag> and then
// removed. <tag> is "<host>-<pid>-<8 random hex digits>", new for every scratch
// directory, so no two writers (even of the same step, on machines with the same host
// name, or a restarted process that got the same pid) ever use the same name.
//
// IN PROGRESS. A writer creates <tmp>/.lock right after the directory and holds an open
// file description lock on it (fcntl F_OFD_SETLK, a shared lock on the whole file,
// through a read-only descriptor) until the directory is published or removed; the
// file is locked under another name (.lock-new) and then renamed, so a .lock is never
// seen unlocked while its writer lives. The kernel, and
// NFSv4's lock manager for a client that dies, release the lock with the process. So a sweeper can
// tell:
//   - .lock held by someone else  -> a write in progress: never touched;
//   - .lock free                  -> its writer died or gave up: removed;
//   - no .lock                    -> the microseconds between mkdir and the lock, or
//     between unlinking .lock and the rename that publishes (a writer removes .lock just
//     before it renames, so a published checkpoint holds no lock file), or a directory
//     of an older ringtrain: removed only once unchanged for kAbandonedAfterSeconds.
// .old-* directories carry no lock: they are removed once unchanged for that long (a
// fresh one is being deleted by its writer right now).
//
// Thread-safety: a ScratchDir belongs to one thread; SweepAbandonedScratchDirs may run
// anywhere (it only removes directories that nobody holds).
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace rt::ckpt {

inline constexpr char kTmpPrefix[] = ".tmp-";
inline constexpr char kOldPrefix[] = ".old-";
inline constexpr char kScratchLockName[] = ".lock";
// A lock-less scratch directory unchanged this long is abandoned (see the file comment).
inline constexpr int64_t kAbandonedAfterSeconds = 600;

// "<host>-<pid>-<random>", host reduced to [A-Za-z0-9.]: a fresh writer tag per call.
std::string NewWriterTag();

// The step of a scratch directory name ("<.tmp-|.old->step-00000012-<tag>"), or -1 if
// `name` is not one.
int64_t StepOfScratchDir(absl::string_view name);

// A writer's scratch directory <ckpt_dir>/.tmp-<final_name>-<tag>/, locked as in
// progress from creation until Publish (which the caller does with rename(2)) or
// destruction. Destruction of an unpublished directory removes it (best effort: a
// failure is logged, and a later sweep removes it because its lock is then free).
class ScratchDir {
 public:
  // Creates the directory and its held lock. Errors name the path (e.g.
  // ResourceExhausted for a full disk, PermissionDenied, or a read-only file system).
  static absl::StatusOr<ScratchDir> Create(const std::string& ckpt_dir,
                                           const std::string& final_name);
  ScratchDir(ScratchDir&& o) noexcept;
  ScratchDir& operator=(ScratchDir&&) = delete;
  ScratchDir(const ScratchDir&) = delete;
  ~ScratchDir();

  const std::string& path() const { return path_; }
  // Unlinks .lock (the lock itself stays held until destruction), so that the renamed
  // directory holds only the checkpoint's files. Call right before the rename.
  absl::Status RemoveLockFile();
  // The directory was renamed away (published) or is otherwise no longer ours to remove.
  void Disown() { owned_ = false; }

 private:
  ScratchDir(std::string path, int lock_fd) : path_(std::move(path)), lock_fd_(lock_fd) {}
  std::string path_;
  int lock_fd_ = -1;
  bool owned_ = true;
};

// Removes every scratch directory of ckpt_dir whose writer is gone (see the file
// comment); never one in progress. Best effort: failures are logged. Returns how many
// were removed.
int SweepAbandonedScratchDirs(const std::string& ckpt_dir);

}  // namespace rt::ckpt
