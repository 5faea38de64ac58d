// Resumable partial files of a fetch (see partial_file.h).
#include "fetch/partial_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "core/crc32c.h"
#include "data/durable_file.h"
#include "fetch/data_files.h"

namespace rt::fetch {
namespace {

constexpr char kRecordHead[] = "ringtrain-fetch-progress 1";

std::string RecordText(const std::string& name, uint64_t size, uint64_t bytes, uint32_t crc) {
  std::string s = absl::StrFormat("%s %s %d %d %08x", kRecordHead, name, size, bytes, crc);
  absl::StrAppend(&s, absl::StrFormat(" %08x\n", Crc32c(s.data(), s.size())));
  return s;
}

struct Record {
  std::string name;
  uint64_t size = 0, bytes = 0;
  uint32_t crc = 0;
};

// Parses a record; false if it is not an intact one.
bool ParseRecord(const std::string& text, Record* r) {
  if (text.empty() || text.back() != '\n') return false;
  const size_t last = text.rfind(' ');
  if (last == std::string::npos) return false;
  uint32_t record_crc;
  if (!absl::SimpleHexAtoi(text.substr(last + 1, text.size() - last - 2), &record_crc))
    return false;
  if (Crc32c(text.data(), last) != record_crc) return false;
  std::vector<std::string> f = absl::StrSplit(text.substr(0, last), ' ');
  if (f.size() != 6 || absl::StrCat(f[0], " ", f[1]) != kRecordHead) return false;
  r->name = f[2];
  return absl::SimpleAtoi(f[3], &r->size) && absl::SimpleAtoi(f[4], &r->bytes) &&
         absl::SimpleHexAtoi(f[5], &r->crc) && r->bytes <= r->size;
}

// CRC32C of the first `n` bytes of `fd`; false on a short read.
bool PrefixCrc(int fd, uint64_t n, uint32_t* crc) {
  std::vector<uint8_t> buf(1 << 20);
  uint32_t c = 0;
  uint64_t at = 0;
  while (at < n) {
    const size_t want = static_cast<size_t>(std::min<uint64_t>(buf.size(), n - at));
    const ssize_t got = pread(fd, buf.data(), want, static_cast<off_t>(at));
    if (got <= 0) return false;
    c = Crc32cExtend(c, buf.data(), static_cast<size_t>(got));
    at += static_cast<uint64_t>(got);
  }
  *crc = c;
  return true;
}

}  // namespace

absl::StatusOr<std::unique_ptr<PartialFile>> PartialFile::Open(const std::string& dir,
                                                               const std::string& name,
                                                               uint64_t size, std::string* note) {
  if (!data::IsPlainFileName(name)) {
    return absl::InvalidArgumentError(absl::StrCat("not a plain file name: '", name, "'"));
  }
  const std::string fetch_dir = absl::StrCat(dir, "/", kFetchDirName);
  if (absl::Status st = data::MakeDirs(fetch_dir); !st.ok()) return st;
  std::unique_ptr<PartialFile> p(new PartialFile());
  p->dir_ = dir;
  p->name_ = name;
  p->size_ = size;
  p->part_path_ = absl::StrCat(fetch_dir, "/", name, ".part");
  p->record_path_ = absl::StrCat(fetch_dir, "/", name, ".progress");
  p->fd_ = open(p->part_path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (p->fd_ < 0) return data::ErrnoStatus(errno, "open " + p->part_path_);
  note->clear();
  absl::StatusOr<std::string> text = data::ReadWholeFile(p->record_path_);
  Record r;
  if (text.ok()) {
    uint32_t crc = 0;
    if (!ParseRecord(*text, &r)) {
      *note = "its progress record is damaged: starting over";
    } else if (r.name != name || r.size != size) {
      *note = absl::StrFormat("its progress record is for %s of %d bytes: starting over", r.name,
                              r.size);
    } else if (!PrefixCrc(p->fd_, r.bytes, &crc) || crc != r.crc) {
      *note = absl::StrFormat(
          "its first %d bytes on disk do not match their recorded checksum: starting over",
          r.bytes);
    } else {
      p->bytes_ = r.bytes;
      p->prefix_crc_ = r.crc;
      if (r.bytes > 0)
        *note = absl::StrFormat("resuming at byte %d of %d (checked)", r.bytes, size);
    }
  }
  if (ftruncate(p->fd_, static_cast<off_t>(p->bytes_)) != 0) {
    return data::ErrnoStatus(errno, "truncate " + p->part_path_);
  }
  if (absl::Status st = p->WriteRecord(); !st.ok()) return st;
  return p;
}

PartialFile::~PartialFile() {
  if (fd_ >= 0) close(fd_);
}

absl::Status PartialFile::WriteRecord() {
  const std::string text = RecordText(name_, size_, bytes_, prefix_crc_);
  const std::string tmp = record_path_ + ".tmp";
  const int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return data::ErrnoStatus(errno, "open " + tmp);
  absl::Status st = data::WriteAll(fd, text.data(), text.size(), tmp);
  close(fd);
  if (!st.ok()) return st;
  if (rename(tmp.c_str(), record_path_.c_str()) != 0) {
    return data::ErrnoStatus(errno, "rename " + tmp);
  }
  return absl::OkStatus();
}

absl::Status PartialFile::Append(absl::Span<const uint8_t> data) {
  if (data.size() > size_ - bytes_) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: %d more bytes at %d would pass its size %d", name_, data.size(), bytes_, size_));
  }
  if (absl::Status st = data::PwriteAll(fd_, data.data(), data.size(), bytes_, part_path_);
      !st.ok()) {
    return st;
  }
  bytes_ += data.size();
  prefix_crc_ = Crc32cExtend(prefix_crc_, data.data(), data.size());
  return WriteRecord();
}

absl::Status PartialFile::Restart() {
  bytes_ = 0;
  prefix_crc_ = 0;
  if (ftruncate(fd_, 0) != 0) return data::ErrnoStatus(errno, "truncate " + part_path_);
  return WriteRecord();
}

absl::Status PartialFile::Finish(const data::DataManifest& manifest) {
  if (bytes_ != size_) {
    return absl::FailedPreconditionError(
        absl::StrFormat("%s: %d of %d bytes fetched", name_, bytes_, size_));
  }
  absl::Status verified = VerifyDataFile(manifest, name_, part_path_);
  if (!verified.ok()) {
    (void)Restart();
    return verified;
  }
  // No fsync here (one per file cost seconds per hundred files on a busy disk): the
  // files are made durable together before the manifest is written (LocalData), and
  // a fetch that resumes after a power loss checks every whole file again.
  const std::string final_path = absl::StrCat(dir_, "/", name_);
  if (rename(part_path_.c_str(), final_path.c_str()) != 0) {
    return data::ErrnoStatus(errno, "rename " + part_path_);
  }
  (void)unlink(record_path_.c_str());
  return absl::OkStatus();
}

}  // namespace rt::fetch
