// What this peer holds of the data directory (see local_data.h).
#include "fetch/local_data.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/log.h"
#include "data/durable_file.h"
#include "fetch/partial_file.h"

namespace rt::fetch {
namespace {

// Size of `path`, or -1 if it is not a regular file.
int64_t FileSize(const std::string& path) {
  struct stat st;
  if (stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return -1;
  return st.st_size;
}

}  // namespace

absl::StatusOr<std::shared_ptr<LocalData>> LocalData::Open(const std::string& dir) {
  std::shared_ptr<LocalData> d(new LocalData(dir));
  std::string text;
  absl::StatusOr<data::DataManifest> m = data::ReadManifest(dir, &text);
  bool resuming = false;
  if (!m.ok() && absl::IsNotFound(m.status())) {
    const std::string fetch_dir = absl::StrCat(dir, "/", kFetchDirName);
    m = data::ReadManifest(fetch_dir, &text);
    if (!m.ok()) {
      if (!absl::IsNotFound(m.status())) {
        LogWarning("%s: ignoring a damaged manifest from an earlier fetch (%s)", fetch_dir,
                   m.status().message());
      }
      return d;  // nothing known yet: fetch everything
    }
    resuming = true;
  }
  if (!m.ok()) return m.status();
  std::lock_guard<std::mutex> lock(d->mu_);
  d->SetManifestLocked(text, *std::move(m));
  bool all = true;
  for (const DataFile& f : d->files_) {
    FileState& s = d->state_[f.name];
    const std::string path = absl::StrCat(dir, "/", f.name);
    const int64_t size = FileSize(path);
    const bool whole = size >= 0 && (f.size == 0 || static_cast<uint64_t>(size) == f.size);
    if (whole && resuming) {
      // Kept from an earlier run of this fetch: checked again, never trusted blindly.
      absl::Status ok = VerifyDataFile(*d->manifest_, f.name, path);
      if (!ok.ok()) {
        LogWarning("%s: removing %s, it fails its check (%s)", dir, f.name, ok.message());
        (void)unlink(path.c_str());
        all = false;
        continue;
      }
      s.verified = true;
    }
    if (!whole) {
      all = false;
      continue;
    }
    s.whole = s.known = true;
    s.size = s.bytes = static_cast<uint64_t>(size);
    s.path = path;
  }
  d->complete_ = all && !resuming;
  if (all && resuming) {
    absl::Status st = d->MarkCompleteLocked();
    if (!st.ok()) return st;
  }
  return d;
}

void LocalData::SetManifestLocked(const std::string& text, data::DataManifest m) {
  manifest_text_ = text;
  files_ = ManifestFiles(m);
  manifest_ = std::move(m);
  for (const DataFile& f : files_) {
    FileState& s = state_[f.name];
    if (f.size != 0 && !s.known) s.size = f.size;
  }
}

bool LocalData::complete() const {
  std::lock_guard<std::mutex> lock(mu_);
  return complete_;
}

bool LocalData::has_manifest() const {
  std::lock_guard<std::mutex> lock(mu_);
  return manifest_.has_value();
}

std::string LocalData::manifest_text() const {
  std::lock_guard<std::mutex> lock(mu_);
  return manifest_text_;
}

std::optional<data::DataManifest> LocalData::manifest() const {
  std::lock_guard<std::mutex> lock(mu_);
  return manifest_;
}

std::vector<DataFile> LocalData::missing_files() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<DataFile> out;
  for (const DataFile& f : files_) {
    auto it = state_.find(f.name);
    if (it == state_.end() || !it->second.whole) out.push_back(f);
  }
  return out;
}

uint64_t LocalData::have_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  uint64_t n = 0;
  for (const auto& [name, s] : state_) n += s.whole ? s.size : s.bytes;
  return n;
}

uint64_t LocalData::total_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  uint64_t n = 0;
  for (const auto& [name, s] : state_) n += s.size;
  return n;
}

absl::Status LocalData::AdoptManifest(const std::string& text, const std::string& from) {
  absl::StatusOr<data::DataManifest> m =
      data::DataManifest::Parse(text, absl::StrCat("(from ", from, ")"));
  if (!m.ok()) return m.status();
  std::lock_guard<std::mutex> lock(mu_);
  if (manifest_.has_value()) {
    if (text == manifest_text_) return absl::OkStatus();
    return absl::FailedPreconditionError(absl::StrFormat(
        "%s holds other data (its manifest differs from the one this peer holds)", from));
  }
  const std::string fetch_dir = absl::StrCat(dir_, "/", kFetchDirName);
  if (absl::Status st = data::MakeDirs(fetch_dir); !st.ok()) return st;
  if (absl::Status st = data::WriteFileAtomically(fetch_dir + "/" + data::kManifestName, text);
      !st.ok()) {
    return st;
  }
  SetManifestLocked(text, *std::move(m));
  last_progress_ = absl::Now();
  cv_.notify_all();
  return absl::OkStatus();
}

void LocalData::SetFetching(bool fetching) {
  std::lock_guard<std::mutex> lock(mu_);
  fetching_ = fetching;
  cv_.notify_all();
}

void LocalData::Progress(const std::string& name, uint64_t size, uint64_t bytes,
                         const std::string& path, uint64_t generation) {
  std::lock_guard<std::mutex> lock(mu_);
  FileState& s = state_[name];
  s.known = true;
  s.size = size;
  s.bytes = bytes;
  s.path = path;
  s.generation = generation;
  last_progress_ = absl::Now();
  cv_.notify_all();
}

void LocalData::FileDone(const std::string& name, bool verified) {
  std::lock_guard<std::mutex> lock(mu_);
  FileState& s = state_[name];
  s.known = s.whole = true;
  s.verified = verified;
  s.bytes = s.size;
  s.path = absl::StrCat(dir_, "/", name);
  last_progress_ = absl::Now();
  cv_.notify_all();
}

absl::Status LocalData::MarkComplete() {
  std::lock_guard<std::mutex> lock(mu_);
  return MarkCompleteLocked();
}

absl::Status LocalData::MarkCompleteLocked() {
  if (complete_) return absl::OkStatus();
  if (!manifest_.has_value()) return absl::FailedPreconditionError("no manifest yet");
  for (const DataFile& f : files_) {
    if (!state_[f.name].whole) {
      return absl::FailedPreconditionError(absl::StrCat(f.name, " is not whole yet"));
    }
  }
  // Every file on disk before the manifest that declares the directory complete.
  for (const DataFile& f : files_) {
    const std::string path = absl::StrCat(dir_, "/", f.name);
    const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return data::ErrnoStatus(errno, "open " + path);
    absl::Status synced = data::SyncFd(fd, path);
    close(fd);
    if (!synced.ok()) return synced;
  }
  if (absl::Status st = data::WriteManifest(dir_, *manifest_); !st.ok()) return st;
  // WriteManifest serialises; the bytes received must be kept exactly (the data
  // fingerprint hashes them): a manifest re-serialised differently is replaced.
  if (absl::StatusOr<std::string> written = data::ReadWholeFile(dir_ + "/" + data::kManifestName);
      !written.ok() || *written != manifest_text_) {
    if (absl::Status st =
            data::WriteFileAtomically(dir_ + "/" + data::kManifestName, manifest_text_);
        !st.ok()) {
      return st;
    }
  }
  std::error_code ec;
  std::filesystem::remove_all(absl::StrCat(dir_, "/", kFetchDirName), ec);
  complete_ = true;
  cv_.notify_all();
  return absl::OkStatus();
}

std::string LocalData::WaitForManifest(absl::Duration timeout) const {
  std::unique_lock<std::mutex> lock(mu_);
  const absl::Time deadline = absl::Now() + timeout;
  while (!manifest_.has_value() && fetching_ && absl::Now() < deadline) {
    cv_.wait_for(lock, absl::ToChronoMilliseconds(
                           std::min(absl::Milliseconds(200), deadline - absl::Now())));
  }
  return manifest_text_;
}

LocalData::FileView LocalData::WaitFor(const std::string& name, uint64_t offset,
                                       absl::Duration stall) const {
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    FileView v;
    auto it = state_.find(name);
    if (it == state_.end()) return v;
    const FileState& s = it->second;
    v.known = s.known;
    v.whole = s.whole;
    v.size = s.size;
    v.bytes = s.whole ? s.size : s.bytes;
    v.path = s.path;
    v.generation = s.generation;
    if (s.whole || (s.known && s.bytes > offset)) return v;
    if (!fetching_ || absl::Now() - last_progress_ > stall) return v;
    cv_.wait_for(lock, std::chrono::milliseconds(200));
  }
}

absl::Status LocalData::CheckServable(const std::string& name) {
  std::string path;
  data::DataManifest m;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = state_.find(name);
    if (it == state_.end() || !it->second.whole) return absl::OkStatus();
    if (!it->second.corrupt.empty()) return absl::DataLossError(it->second.corrupt);
    if (it->second.verified) return absl::OkStatus();
    path = it->second.path;
    m = *manifest_;
  }
  absl::Status st = VerifyDataFile(m, name, path);  // outside the lock: reads the file
  std::lock_guard<std::mutex> lock(mu_);
  FileState& s = state_[name];
  if (st.ok()) {
    s.verified = true;
  } else {
    s.corrupt = std::string(st.message());
  }
  return st;
}

}  // namespace rt::fetch
