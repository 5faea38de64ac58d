// TempDir: a fresh directory under /tmp for one test, removed (recursively) when the
// test ends, also when it fails.
#pragma once

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <system_error>

namespace rt::testing {

class TempDir {
 public:
  TempDir() {
    char pattern[] = "/tmp/rt_ckpt_test_XXXXXX";
    const char* p = ::mkdtemp(pattern);
    if (p == nullptr) throw std::runtime_error("mkdtemp failed");
    path_ = p;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  std::string operator/(const std::string& rel) const { return path_ + "/" + rel; }

 private:
  std::string path_;
};

}  // namespace rt::testing
