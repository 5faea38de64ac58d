// Durable file helpers: a full disk is an error naming the file, atomic writes leave no
// temporary file, mkdir -p works on nested paths.
#include "data/durable_file.h"

#include <doctest/doctest.h>
#include <fcntl.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include "data/temp_dir.h"

namespace rt::data {
namespace {

TEST_CASE("a full disk is a ResourceExhausted error naming the file") {
  int fd = ::open("/dev/full", O_WRONLY | O_CLOEXEC);
  REQUIRE(fd >= 0);
  const std::string bytes(100000, 'x');
  absl::Status st = WriteAll(fd, bytes.data(), bytes.size(), "/data/train-00003.bin.tmp");
  ::close(fd);
  REQUIRE_FALSE(st.ok());
  CHECK(absl::IsResourceExhausted(st));
  const std::string msg(st.message());
  CHECK_MESSAGE(msg.find("/data/train-00003.bin.tmp") != std::string::npos, msg);
  CHECK_MESSAGE(msg.find("No space left on device") != std::string::npos, msg);
}

TEST_CASE("atomic write, read back, nested mkdir") {
  testing::TempDir tmp;
  const std::string dir = tmp / "a/b/c";
  REQUIRE(MakeDirs(dir).ok());
  REQUIRE(MakeDirs(dir).ok());  // exists: fine
  REQUIRE(WriteFileAtomically(dir + "/f.txt", "nội dung").ok());
  CHECK_FALSE(std::filesystem::exists(dir + "/f.txt.tmp"));
  auto back = ReadWholeFile(dir + "/f.txt");
  REQUIRE(back.ok());
  CHECK(*back == "nội dung");
  CHECK(absl::IsNotFound(ReadWholeFile(dir + "/none").status()));
  CHECK_FALSE(MakeDirs(dir + "/f.txt").ok());  // a file, not a directory
}

}  // namespace
}  // namespace rt::data
