// Implementation of input file listing, zstd streaming and line splitting (see text_input.h).
#include "data/text_input.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <set>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/status_macros.h"
#include "data/durable_file.h"
#include "data/utf8.h"

namespace rt::data {
namespace fs = std::filesystem;

namespace {

constexpr size_t kReadBytes = 1 << 20;

absl::Status CheckReadable(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return ErrnoStatus(errno, "cannot read input " + path);
  ::close(fd);
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::vector<InputFile>> ListInputFiles(const std::vector<std::string>& paths) {
  std::vector<InputFile> out;
  std::set<std::string> seen;
  auto add = [&](const fs::path& p) -> absl::Status {
    std::error_code ec;
    std::string canonical = fs::weakly_canonical(p, ec).string();
    if (ec) canonical = p.string();
    if (!seen.insert(canonical).second) return absl::OkStatus();
    RETURN_IF_ERROR(CheckReadable(p.string()));
    InputFile f;
    f.path = p.string();
    f.disk_bytes = fs::file_size(p, ec);
    if (ec)
      return absl::InternalError(absl::StrCat("cannot stat input ", f.path, ": ", ec.message()));
    f.zstd = absl::EndsWith(f.path, ".zst");
    out.push_back(std::move(f));
    return absl::OkStatus();
  };
  for (const std::string& path : paths) {
    std::error_code ec;
    fs::file_status st = fs::status(path, ec);
    if (ec || !fs::exists(st)) {
      return absl::NotFoundError(absl::StrCat("input ", path, " does not exist"));
    }
    if (fs::is_directory(st)) {
      std::vector<fs::path> found;
      fs::recursive_directory_iterator it(path, ec), end;
      if (ec)
        return absl::PermissionDeniedError(absl::StrCat("cannot list ", path, ": ", ec.message()));
      for (; it != end; it.increment(ec)) {
        if (ec) {
          return absl::PermissionDeniedError(
              absl::StrCat("cannot list ", path, ": ", ec.message()));
        }
        const std::string name = it->path().filename().string();
        if (!it->is_regular_file(ec) || name.empty() || name[0] == '.') continue;
        if (absl::EndsWith(name, ".txt") || absl::EndsWith(name, ".zst"))
          found.push_back(it->path());
      }
      std::sort(found.begin(), found.end());
      for (const fs::path& p : found) RETURN_IF_ERROR(add(p));
    } else if (fs::is_regular_file(st)) {
      RETURN_IF_ERROR(add(path));
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat("input ", path, " is not a file or directory"));
    }
  }
  return out;
}

absl::StatusOr<InputStream> InputStream::Open(const InputFile& file) {
  InputStream s;
  s.path_ = file.path;
  s.fd_ = ::open(file.path.c_str(), O_RDONLY | O_CLOEXEC);
  if (s.fd_ < 0) return ErrnoStatus(errno, "cannot read input " + file.path);
  ::posix_fadvise(s.fd_, 0, 0, POSIX_FADV_SEQUENTIAL);
  if (file.zstd) {
    s.zstd_ = ZSTD_createDStream();
    if (s.zstd_ == nullptr) return absl::ResourceExhaustedError("cannot create a zstd stream");
    ZSTD_initDStream(s.zstd_);
    s.in_buf_.resize(ZSTD_DStreamInSize());
  }
  return s;
}

InputStream::InputStream(InputStream&& o) noexcept { *this = std::move(o); }

InputStream& InputStream::operator=(InputStream&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) ::close(fd_);
    if (zstd_ != nullptr) ZSTD_freeDStream(zstd_);
    path_ = std::move(o.path_);
    fd_ = o.fd_;
    zstd_ = o.zstd_;
    in_buf_ = std::move(o.in_buf_);
    in_ = o.in_;
    in_.src = in_buf_.data();
    disk_eof_ = o.disk_eof_;
    last_ret_ = o.last_ret_;
    disk_read_ = o.disk_read_;
    o.fd_ = -1;
    o.zstd_ = nullptr;
  }
  return *this;
}

InputStream::~InputStream() {
  if (fd_ >= 0) ::close(fd_);
  if (zstd_ != nullptr) ZSTD_freeDStream(zstd_);
}

absl::StatusOr<size_t> InputStream::ReadDisk(char* buf, size_t cap) {
  while (true) {
    ssize_t r = ::read(fd_, buf, cap);
    if (r < 0) {
      if (errno == EINTR) continue;
      return ErrnoStatus(errno, absl::StrCat("read ", path_, " at byte ", disk_read_));
    }
    disk_read_ += static_cast<uint64_t>(r);
    return static_cast<size_t>(r);
  }
}

absl::StatusOr<size_t> InputStream::Read(char* buf, size_t cap) {
  if (zstd_ == nullptr) return ReadDisk(buf, cap);
  ZSTD_outBuffer out{buf, cap, 0};
  while (out.pos == 0) {
    if (in_.pos == in_.size && !disk_eof_) {
      ASSIGN_OR_RETURN(size_t n, ReadDisk(in_buf_.data(), in_buf_.size()));
      in_ = ZSTD_inBuffer{in_buf_.data(), n, 0};
      if (n == 0) disk_eof_ = true;
    }
    if (in_.pos == in_.size && disk_eof_) {
      // All input consumed: the last frame must be complete. A frame can still hold
      // buffered output, so flush before concluding.
      size_t ret = ZSTD_decompressStream(zstd_, &out, &in_);
      if (ZSTD_isError(ret)) {
        return absl::DataLossError(
            absl::StrCat("corrupt zstd data in ", path_, ": ", ZSTD_getErrorName(ret)));
      }
      if (out.pos > 0) break;
      if (last_ret_ != 0 && ret != 0) {
        return absl::DataLossError(absl::StrFormat(
            "zstd input %s is truncated (ends inside a frame after %d bytes)", path_, disk_read_));
      }
      return size_t{0};
    }
    const size_t before = in_.pos;
    size_t ret = ZSTD_decompressStream(zstd_, &out, &in_);
    if (ZSTD_isError(ret)) {
      return absl::DataLossError(absl::StrFormat("corrupt zstd data in %s near byte %d: %s", path_,
                                                 disk_read_ - (in_.size - before),
                                                 ZSTD_getErrorName(ret)));
    }
    last_ret_ = ret;
  }
  return out.pos;
}

LineReader::LineReader(InputStream stream, size_t max_segment_bytes)
    : stream_(std::move(stream)), max_segment_(std::max<size_t>(max_segment_bytes, 16)) {}

absl::StatusOr<bool> LineReader::Next(Line* line) {
  while (true) {
    const size_t avail = buf_.size() - begin_;
    const size_t limit = std::min(avail, max_segment_ + 1);
    const char* start = buf_.data() + begin_;
    const void* nl = std::memchr(start, '\n', limit);
    if (nl != nullptr || (eof_ && avail > 0) || avail > max_segment_) {
      size_t len, consumed;
      bool complete = true;
      if (nl != nullptr) {
        len = static_cast<const char*>(nl) - start;
        consumed = len + 1;
      } else if (avail > max_segment_) {
        // Over-long line: cut before a space near the end, else at a character boundary.
        absl::string_view window(start, max_segment_);
        size_t space = window.rfind(' ');
        len = (space != absl::string_view::npos && space >= max_segment_ * 3 / 4 && space > 0)
                  ? space
                  : Utf8PrefixAtBoundary(absl::string_view(start, avail), max_segment_);
        consumed = len;
        complete = false;
      } else {
        len = avail;  // last line without a newline
        consumed = avail;
      }
      absl::string_view text(start, len);
      if (complete && !text.empty() && text.back() == '\r') text.remove_suffix(1);
      line->text = text;
      line->line_no = line_no_;
      line->complete = complete;
      begin_ += consumed;
      if (complete) ++line_no_;
      return true;
    }
    if (eof_) return false;
    // Need more bytes: compact, then read.
    buf_.erase(0, begin_);
    begin_ = 0;
    const size_t old = buf_.size();
    buf_.resize(old + kReadBytes);
    ASSIGN_OR_RETURN(size_t n, stream_.Read(&buf_[old], kReadBytes));
    buf_.resize(old + n);
    if (n == 0) eof_ = true;
  }
}

}  // namespace rt::data
