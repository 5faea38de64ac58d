// SmallTmpfs: a small tmpfs mounted for the life of the object (as root), for tests of
// full and read-only disks (tests/ckpt, tests/integration/ckpt_disk_test.cc). Tests
// that cannot mount it (not root) say so and skip that case.
#pragma once

#include <sys/mount.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <string>
#include <thread>

namespace rt::testing {

// A tmpfs of `size` mounted at `dir` for the life of the object.
class SmallTmpfs {
 public:
  SmallTmpfs(std::string dir, const std::string& size) : dir_(std::move(dir)) {
    std::filesystem::create_directories(dir_);
    const std::string opts = "size=" + size + ",mode=0755";
    if (::mount("rt-ckpt-test", dir_.c_str(), "tmpfs", 0, opts.c_str()) == 0) {
      mounted_ = true;
    } else {
      error_ = std::strerror(errno);
    }
  }
  ~SmallTmpfs() {
    if (mounted_) ::umount2(dir_.c_str(), MNT_DETACH);
  }
  SmallTmpfs(const SmallTmpfs&) = delete;
  SmallTmpfs& operator=(const SmallTmpfs&) = delete;
  bool mounted() const { return mounted_; }
  const std::string& error() const { return error_; }
  // Retried for a while: a read-only remount fails (EBUSY) while a checkpoint write
  // has a file open for writing.
  bool Remount(bool read_only) {
    const unsigned long flags = MS_REMOUNT | (read_only ? MS_RDONLY : 0);
    for (int i = 0; i < 500; ++i) {
      if (::mount("rt-ckpt-test", dir_.c_str(), "tmpfs", flags, nullptr) == 0) return true;
      if (errno != EBUSY) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    error_ = std::strerror(errno);
    return false;
  }

 private:
  std::string dir_;
  bool mounted_ = false;
  std::string error_;
};

}  // namespace rt::testing
