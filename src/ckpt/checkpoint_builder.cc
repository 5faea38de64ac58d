// A checkpoint built in steps, sections written at offsets (see checkpoint_builder.h),
// and WriteCheckpoint on top of it.
#include "ckpt/checkpoint_builder.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <iterator>
#include <limits>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "ckpt/checkpoint.h"
#include "ckpt/checkpoint_publish.h"
#include "ckpt/file_io.h"
#include "core/status_macros.h"

namespace rt::ckpt {
namespace {

// Gives the open, empty file `fd` exactly `bytes` zero bytes, allocated on disk where the
// file system can. Not posix_fallocate: where the file system lacks fallocate(2), glibc
// emulates it by writing a byte into every block, i.e. the whole section over NFS once
// more; there the file is only sized (sparse) and a full disk shows when written.
absl::Status AllocateFile(int fd, const std::string& path, uint64_t bytes) {
  int r = 0;
  do {
    r = ::fallocate(fd, 0, 0, static_cast<off_t>(bytes));
  } while (r != 0 && errno == EINTR);
  if (r == 0) return absl::OkStatus();
  if (errno != EOPNOTSUPP && errno != ENOSYS) {
    absl::Status s = ErrnoError(errno, "allocate", path);
    return absl::Status(s.code(), absl::StrFormat("%s (%d bytes)", s.message(), bytes));
  }
  if (::ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
    absl::Status s = ErrnoError(errno, "resize", path);
    return absl::Status(s.code(), absl::StrFormat("%s (to %d bytes)", s.message(), bytes));
  }
  return absl::OkStatus();
}

// Adds [begin, end) to `ranges` (begin -> end; disjoint, never touching), merging.
void AddRange(std::map<uint64_t, uint64_t>* ranges, uint64_t begin, uint64_t end) {
  if (begin == end) return;
  auto it = ranges->upper_bound(begin);
  if (it != ranges->begin()) {
    auto prev = std::prev(it);
    if (prev->second >= begin) {
      begin = prev->first;
      end = std::max(end, prev->second);
      it = ranges->erase(prev);
    }
  }
  while (it != ranges->end() && it->first <= end) {
    end = std::max(end, it->second);
    it = ranges->erase(it);
  }
  (*ranges)[begin] = end;
}

// The first range of [0, bytes) that `ranges` does not cover, or {bytes, bytes}.
std::pair<uint64_t, uint64_t> FirstGap(const std::map<uint64_t, uint64_t>& ranges, uint64_t bytes) {
  uint64_t covered = 0;
  for (const auto& [begin, end] : ranges) {
    if (begin > covered) return {covered, begin};
    covered = std::max(covered, end);
  }
  return {std::min(covered, bytes), bytes};
}

}  // namespace

absl::StatusOr<std::unique_ptr<CheckpointBuilder>> CheckpointBuilder::Begin(
    const std::string& ckpt_dir_in, const CheckpointMeta& meta) {
  std::string ckpt_dir = StripTrailingSlashes(ckpt_dir_in);
  RETURN_IF_ERROR(ValidateCheckpointMeta(ckpt_dir, meta));
  RETURN_IF_ERROR(PrepareCheckpointDir(ckpt_dir, meta));
  ASSIGN_OR_RETURN(ScratchDir scratch, ScratchDir::Create(ckpt_dir, StepDirName(meta.step)));
  return std::unique_ptr<CheckpointBuilder>(
      new CheckpointBuilder(std::move(ckpt_dir), meta, std::move(scratch)));
}

CheckpointBuilder::CheckpointBuilder(std::string ckpt_dir, CheckpointMeta meta, ScratchDir scratch)
    : ckpt_dir_(std::move(ckpt_dir)), meta_(std::move(meta)) {
  scratch_.emplace(std::move(scratch));
}

CheckpointBuilder::~CheckpointBuilder() {
  CloseFiles();
  // scratch_, if still held, removes the unpublished directory as it is destroyed.
}

std::string CheckpointBuilder::scratch_path() const {
  return scratch_.has_value() ? scratch_->path() : std::string();
}

absl::Status CheckpointBuilder::Reserve(const std::string& name, uint64_t bytes) {
  RETURN_IF_ERROR(Usable());
  if (absl::Status s = AddSectionName(name, &names_); !s.ok()) return Fail(std::move(s));
  if (bytes > static_cast<uint64_t>(std::numeric_limits<off_t>::max())) {
    return Fail(absl::InvalidArgumentError(
        absl::StrFormat("checkpoint section '%s': %d bytes is too large", name, bytes)));
  }
  const std::string path = SectionPath(name);
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) return Fail(ErrnoError(errno, "create", path));
  Section section;
  section.name = name;
  section.bytes = bytes;
  section.reserved = true;
  section.fd = fd;  // from here on closed by CloseFiles
  sections_.push_back(std::move(section));
  if (bytes > 0) {
    if (absl::Status s = AllocateFile(fd, path, bytes); !s.ok()) return Fail(std::move(s));
  }
  return absl::OkStatus();
}

absl::Status CheckpointBuilder::WriteAt(const std::string& name, uint64_t offset,
                                        absl::Span<const uint8_t> data) {
  RETURN_IF_ERROR(Usable());
  auto it = std::find_if(sections_.begin(), sections_.end(),
                         [&](const Section& s) { return s.name == name; });
  if (it == sections_.end() || !it->reserved) {
    return Fail(absl::InvalidArgumentError(absl::StrCat(
        "checkpoint section '", EscapeManifestToken(name), "' cannot be written at an offset: ",
        it == sections_.end() ? "it was not reserved" : "it was given whole (Add)")));
  }
  Section& section = *it;
  if (offset > section.bytes || data.size() > section.bytes - offset) {
    return Fail(absl::InvalidArgumentError(
        absl::StrFormat("checkpoint section '%s': %d bytes at offset %d do not fit in its %d bytes",
                        name, data.size(), offset, section.bytes)));
  }
  for (size_t done = 0; done < data.size();) {
    const ssize_t n = ::pwrite(section.fd, data.data() + done, data.size() - done,
                               static_cast<off_t>(offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      // n == 0 should not happen for regular files; treat it as "no space".
      absl::Status s = ErrnoError(n < 0 ? errno : ENOSPC, "write", SectionPath(name));
      return Fail(absl::Status(s.code(), absl::StrFormat("%s (wrote %d of %d bytes at offset %d)",
                                                         s.message(), done, data.size(), offset)));
    }
    done += static_cast<size_t>(n);
  }
  AddRange(&section.written, offset, offset + data.size());
  return absl::OkStatus();
}

absl::Status CheckpointBuilder::Add(const std::string& name, absl::Span<const uint8_t> bytes) {
  RETURN_IF_ERROR(Usable());
  if (absl::Status s = AddSectionName(name, &names_); !s.ok()) return Fail(std::move(s));
  Section section;
  section.name = name;
  section.bytes = bytes.size();
  section.whole = bytes;
  sections_.push_back(std::move(section));
  return absl::OkStatus();
}

absl::Status CheckpointBuilder::Commit(int keep) {
  RETURN_IF_ERROR(Usable());
  if (absl::Status s = CommitSteps(keep); !s.ok()) return Fail(std::move(s));
  committed_ = true;
  scratch_.reset();  // renamed into place, or an identical copy was kept: ours goes
  return absl::OkStatus();
}

absl::Status CheckpointBuilder::CommitSteps(int keep) {
  RETURN_IF_ERROR(ValidateKeep(keep));
  for (const Section& s : sections_) {
    if (!s.reserved) continue;
    const auto [gap_begin, gap_end] = FirstGap(s.written, s.bytes);
    if (gap_begin < gap_end) {
      return absl::FailedPreconditionError(absl::StrFormat(
          "checkpoint section '%s': bytes [%d, %d) of %d were never written (a lost piece?); "
          "not publishing step %d",
          s.name, gap_begin, gap_end, s.bytes, meta_.step));
    }
  }
  std::vector<SectionInfo> infos;
  infos.reserve(sections_.size());
  for (Section& s : sections_) {
    SectionInfo info;
    info.name = s.name;
    info.bytes = s.bytes;
    const std::string path = SectionPath(s.name);
    if (s.reserved) {
      if (::fsync(s.fd) != 0) return ErrnoError(errno, "fsync", path);
      const int fd = std::exchange(s.fd, -1);
      if (::close(fd) != 0) return ErrnoError(errno, "close", path);
      ASSIGN_OR_RETURN(info.crc32c, CrcOfFile(path, s.bytes));
    } else {
      RETURN_IF_ERROR(WriteFileDurably(path, s.whole, &info.crc32c));
    }
    infos.push_back(std::move(info));
  }
  return PublishCheckpoint(ckpt_dir_, meta_, infos, &*scratch_, keep);
}

absl::Status CheckpointBuilder::Usable() const {
  if (!error_.ok()) return error_;
  if (committed_) {
    return absl::FailedPreconditionError(
        absl::StrFormat("checkpoint step %d in %s was already committed", meta_.step, ckpt_dir_));
  }
  return absl::OkStatus();
}

absl::Status CheckpointBuilder::Fail(absl::Status error) {
  if (error_.ok()) error_ = std::move(error);
  CloseFiles();
  scratch_.reset();  // removes the unpublished directory now: on a full disk, its space
  return error_;
}

void CheckpointBuilder::CloseFiles() {
  for (Section& s : sections_) {
    if (s.fd >= 0) ::close(std::exchange(s.fd, -1));
  }
}

std::string CheckpointBuilder::SectionPath(const std::string& name) const {
  return absl::StrCat(scratch_->path(), "/", name, ".bin");
}

absl::Status WriteCheckpoint(const std::string& ckpt_dir, const CheckpointMeta& meta,
                             const std::vector<SectionRef>& sections, int keep) {
  // The whole request is checked before the disk is touched.
  RETURN_IF_ERROR(ValidateCheckpointMeta(StripTrailingSlashes(ckpt_dir), meta));
  RETURN_IF_ERROR(ValidateKeep(keep));
  std::set<std::string> names;
  for (const SectionRef& s : sections) RETURN_IF_ERROR(AddSectionName(s.name, &names));

  ASSIGN_OR_RETURN(std::unique_ptr<CheckpointBuilder> builder,
                   CheckpointBuilder::Begin(ckpt_dir, meta));
  for (const SectionRef& s : sections) RETURN_IF_ERROR(builder->Add(s.name, s.bytes));
  return builder->Commit(keep);
}

}  // namespace rt::ckpt
