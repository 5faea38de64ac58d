// Markers of the live peers that use a checkpoint directory (see peer_marker.h).
#include "ckpt/peer_marker.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <system_error>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "ckpt/file_io.h"

namespace rt::ckpt {
namespace {

namespace fs = std::filesystem;

constexpr char kMarkerPrefix[] = ".peer-";

int HexDigit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

}  // namespace

std::string PeerMarkerFileName(const std::string& peer_name) {
  std::string out = kMarkerPrefix;
  for (unsigned char c : peer_name) {
    if (c == '/' || c == '%' || c < 0x21 || c > 0x7e) {
      absl::StrAppendFormat(&out, "%%%02X", c);
    } else {
      out.push_back(static_cast<char>(c));
    }
  }
  return out;
}

std::string PeerNameOfMarker(const std::string& file_name) {
  if (!absl::StartsWith(file_name, kMarkerPrefix)) return "";
  std::string name;
  for (size_t i = sizeof(kMarkerPrefix) - 1; i < file_name.size(); ++i) {
    if (file_name[i] != '%') {
      name.push_back(file_name[i]);
      continue;
    }
    if (i + 2 >= file_name.size()) return "";
    const int hi = HexDigit(file_name[i + 1]), lo = HexDigit(file_name[i + 2]);
    if (hi < 0 || lo < 0) return "";
    name.push_back(static_cast<char>(hi * 16 + lo));
    i += 2;
  }
  return name;
}

absl::StatusOr<std::unique_ptr<PeerMarker>> PeerMarker::Create(const std::string& ckpt_dir,
                                                               const std::string& peer_name) {
  if (peer_name.empty()) return absl::InvalidArgumentError("PeerMarker needs a peer name");
  std::error_code ec;
  fs::create_directories(ckpt_dir, ec);
  if (ec) return ErrnoError(ec.value(), "create directory", ckpt_dir);
  const std::string path = ckpt_dir + "/" + PeerMarkerFileName(peer_name);
  const absl::Status twice = absl::FailedPreconditionError(absl::StrCat(
      path, " is held by another running process: peer ", peer_name,
      " runs twice on this checkpoint directory (two processes with the same --self or "
      "--rank?)"));
  {
    // Written through a descriptor of its own, closed at once: the lock below needs only
    // a read-only one, so no file stays open for writing (a file system with one cannot
    // be remounted read-only).
    const int wfd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
    if (wfd < 0) return ErrnoError(errno, "create", path);
    if (FileLockedByOthers(wfd)) {
      ::close(wfd);
      return twice;
    }
    char host[256] = {0};
    if (::gethostname(host, sizeof(host) - 1) != 0) host[0] = 0;
    const std::string text = absl::StrFormat("ringtrain peer marker\npeer %s\nhost %s\npid %d\n",
                                             peer_name, host, ::getpid());
    const bool written = ::ftruncate(wfd, 0) == 0 && ::pwrite(wfd, text.data(), text.size(), 0) ==
                                                         static_cast<ssize_t>(text.size());
    const int err = errno;
    ::close(wfd);
    if (!written) return ErrnoError(err, "write", path);
  }
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) return ErrnoError(errno, "open", path);
  if (FileLockedByOthers(fd)) {  // the other one started meanwhile
    ::close(fd);
    return twice;
  }
  if (!HoldReadLock(fd)) {
    absl::Status s = ErrnoError(errno, "lock", path);
    ::close(fd);
    return s;
  }
  return std::unique_ptr<PeerMarker>(new PeerMarker(ckpt_dir, peer_name, path, fd));
}

PeerMarker::~PeerMarker() {
  // Unlinked while still locked, so no other peer ever sees our name free and ours.
  ::unlink(path_.c_str());
  ::close(fd_);
}

bool PeerMarker::IsLive(const std::string& peer_name) const {
  if (peer_name == name_) return false;
  const std::string path = dir_ + "/" + PeerMarkerFileName(peer_name);
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) return false;
  const bool live = FileLockedByOthers(fd);
  ::close(fd);
  return live;
}

std::vector<std::string> PeerMarker::LiveOthers() const {
  std::vector<std::string> live;
  std::error_code ec;
  for (fs::directory_iterator it(dir_, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = PeerNameOfMarker(it->path().filename().string());
    if (!name.empty() && IsLive(name)) live.push_back(name);
  }
  std::sort(live.begin(), live.end());
  return live;
}

}  // namespace rt::ckpt
