// The directory-level steps of every checkpoint write: validation, stale-writer refusal,
// publishing by rename, retention (see checkpoint_publish.h; guarantees in checkpoint.h).
#include "ckpt/checkpoint_publish.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <set>
#include <system_error>
#include <tuple>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "ckpt/checkpoint.h"
#include "ckpt/file_io.h"
#include "core/log.h"
#include "core/status_macros.h"

namespace rt::ckpt {
namespace {

namespace fs = std::filesystem;

// Names of the entries of `dir`, sorted.
absl::StatusOr<std::vector<std::string>> ListDir(const std::string& dir) {
  std::vector<std::string> names;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    names.push_back(it->path().filename().string());
  }
  if (ec) {
    return absl::Status(absl::ErrnoToStatusCode(ec.value()),
                        absl::StrCat("listing ", dir, ": ", ec.message()));
  }
  std::sort(names.begin(), names.end());
  return names;
}

// Fails if ckpt_dir holds a checkpoint whose manifest validates and whose
// (epoch, step) is newer than meta's. Unreadable manifests are not checkpoints.
absl::Status CheckNotStale(const std::string& ckpt_dir, const CheckpointMeta& meta) {
  ASSIGN_OR_RETURN(std::vector<std::string> names, ListDir(ckpt_dir));
  for (const std::string& name : names) {
    int64_t step = 0;
    if (!ParseStepDirName(name, &step)) continue;
    const std::string manifest = ckpt_dir + "/" + name + "/" + kManifestFileName;
    auto text = ReadSmallFile(manifest, kMaxManifestBytes);
    if (!text.ok()) continue;
    CheckpointMeta other;
    std::vector<SectionInfo> sections;
    if (!DecodeManifest(*text, manifest, &other, &sections).ok()) continue;
    if (other.epoch == meta.epoch && other.step > meta.step) {
      // The same view already wrote a later step (another writer of this directory ran
      // ahead): this older checkpoint adds nothing.
      return absl::AlreadyExistsError(absl::StrFormat(
          "not writing checkpoint step %d epoch %d: %s/%s of the same epoch is newer (step %d)",
          meta.step, meta.epoch, ckpt_dir, name, other.step));
    }
    if (std::make_tuple(other.epoch, other.step) > std::make_tuple(meta.epoch, meta.step)) {
      return absl::FailedPreconditionError(absl::StrFormat(
          "refusing to write checkpoint step %d epoch %d: %s/%s is newer (step %d epoch %d); "
          "this writer is stale (an older view's leader) or the directory belongs to another run",
          meta.step, meta.epoch, ckpt_dir, name, other.step, other.epoch));
    }
  }
  return absl::OkStatus();
}

// Moves `dir` out of the way atomically (so nobody sees a half-deleted checkpoint),
// then deletes it.
absl::Status RetireDir(const std::string& ckpt_dir, const std::string& name) {
  const std::string from = ckpt_dir + "/" + name;
  const std::string to = absl::StrCat(ckpt_dir, "/", kOldPrefix, name, "-", NewWriterTag());
  if (::rename(from.c_str(), to.c_str()) != 0) {
    if (errno == ENOENT) return absl::OkStatus();  // another writer retired it first
    return ErrnoError(errno, "rename", from);
  }
  return RemoveTree(to);
}

// Retention after writing `written_name` (see checkpoint.h). Best effort: failures
// are logged, never fail the write that already succeeded.
void ApplyRetention(const std::string& ckpt_dir, const std::string& written_name,
                    int64_t written_step, int keep) {
  auto names = ListDir(ckpt_dir);
  if (!names.ok()) {
    LogWarning("checkpoint retention: %s", names.status().ToString());
    return;
  }
  struct Valid {
    uint64_t epoch;
    int64_t step;
    std::string name;
  };
  std::vector<Valid> valid;
  std::vector<std::pair<int64_t, std::string>> invalid;
  for (const std::string& name : *names) {
    int64_t step = 0;
    if (!ParseStepDirName(name, &step)) continue;
    auto c = Checkpoint::Open(ckpt_dir + "/" + name);
    if (c.ok()) {
      valid.push_back({c->meta().epoch, c->meta().step, name});
    } else {
      invalid.emplace_back(step, name);
    }
  }
  if (keep == 0) return;
  std::sort(valid.begin(), valid.end(), [](const Valid& a, const Valid& b) {
    return std::tie(a.epoch, a.step, a.name) > std::tie(b.epoch, b.step, b.name);
  });
  int64_t oldest_kept_step = written_step;
  int kept = 0;
  for (const Valid& v : valid) {
    // The just-written checkpoint is always kept (it is the newest unless a
    // checkpoint of the same (epoch, step) sorts before it by name).
    if (v.name == written_name || kept < keep) {
      ++kept;
      oldest_kept_step = std::min(oldest_kept_step, v.step);
      continue;
    }
    LogInfo("checkpoint retention (keep %d): deleting %s/%s", keep, ckpt_dir, v.name);
    if (absl::Status s = RetireDir(ckpt_dir, v.name); !s.ok()) {
      LogWarning("checkpoint retention: %s", s.ToString());
    }
  }
  for (const auto& [step, name] : invalid) {
    if (step >= oldest_kept_step) continue;
    LogWarning("checkpoint retention: deleting invalid %s/%s", ckpt_dir, name);
    if (absl::Status s = RetireDir(ckpt_dir, name); !s.ok()) {
      LogWarning("checkpoint retention: %s", s.ToString());
    }
  }
}

// True if `dir` is a checkpoint with exactly this manifest (so the same bytes: every
// section's size and crc32c are in it) whose files have the sizes it states.
bool IsSameCheckpoint(const std::string& dir, const std::string& manifest) {
  auto text = ReadSmallFile(dir + "/" + kManifestFileName, kMaxManifestBytes);
  return text.ok() && *text == manifest && Checkpoint::Open(dir).ok();
}

enum class Published { kOurs, kIdenticalExisted };

// Renames tmp to ckpt_dir/final_name and fsyncs ckpt_dir. If final_name exists (an
// older, equal or invalid checkpoint of that step, or the same checkpoint published
// meanwhile by another writer of a shared directory), then: the very same checkpoint
// is kept as it is (kIdenticalExisted; tmp stays for the caller to remove); anything
// else is moved aside, replaced, and deleted. Collisions with other writers are
// retried a few times.
absl::StatusOr<Published> Publish(const std::string& ckpt_dir, const std::string& tmp,
                                  const std::string& final_name, const std::string& manifest) {
  const std::string final_path = ckpt_dir + "/" + final_name;
  for (int attempt = 0; attempt < 4; ++attempt) {
    if (::rename(tmp.c_str(), final_path.c_str()) == 0) {
      RETURN_IF_ERROR(FsyncDirectory(ckpt_dir));
      return Published::kOurs;
    }
    if (errno != ENOTEMPTY && errno != EEXIST) return ErrnoError(errno, "rename", tmp);
    if (IsSameCheckpoint(final_path, manifest)) return Published::kIdenticalExisted;
    const std::string aside =
        absl::StrCat(ckpt_dir, "/", kOldPrefix, final_name, "-", NewWriterTag());
    if (::rename(final_path.c_str(), aside.c_str()) != 0) {
      if (errno == ENOENT) continue;  // another writer moved it meanwhile: look again
      return ErrnoError(errno, "rename", final_path);
    }
    if (::rename(tmp.c_str(), final_path.c_str()) != 0) {
      const int err = errno;
      if (err == ENOTEMPTY || err == EEXIST) {
        // Another writer published in between; what we moved aside was being replaced.
        (void)RemoveTree(aside);
        continue;
      }
      ::rename(aside.c_str(), final_path.c_str());  // put the old one back
      return ErrnoError(err, "rename", tmp);
    }
    RETURN_IF_ERROR(FsyncDirectory(ckpt_dir));
    if (absl::Status s = RemoveTree(aside); !s.ok()) LogWarning("checkpoint: %s", s.ToString());
    return Published::kOurs;
  }
  return absl::AbortedError(absl::StrCat("rename ", tmp, " to ", final_path,
                                         ": other writers keep replacing it (a shared directory)"));
}

}  // namespace

std::string StripTrailingSlashes(std::string path) {
  while (path.size() > 1 && path.back() == '/') path.pop_back();
  return path;
}

absl::Status ValidateCheckpointMeta(const std::string& ckpt_dir, const CheckpointMeta& meta) {
  if (ckpt_dir.empty()) return absl::InvalidArgumentError("empty checkpoint directory");
  if (meta.step < 0) return absl::InvalidArgumentError(absl::StrCat("negative step ", meta.step));
  for (const auto& [key, value] : meta.fields) {
    if (key.empty()) return absl::InvalidArgumentError("empty checkpoint field key");
  }
  return absl::OkStatus();
}

absl::Status ValidateKeep(int keep) {
  if (keep < 0) return absl::InvalidArgumentError(absl::StrCat("negative keep ", keep));
  return absl::OkStatus();
}

absl::Status AddSectionName(const std::string& name, std::set<std::string>* names) {
  if (!IsValidSectionName(name)) {
    return absl::InvalidArgumentError(
        absl::StrCat("invalid checkpoint section name '", EscapeManifestToken(name),
                     "' (1..128 of [A-Za-z0-9_.-], not starting with '.', not 'manifest')"));
  }
  if (!names->insert(name).second) {
    return absl::InvalidArgumentError(absl::StrCat("duplicate checkpoint section '", name, "'"));
  }
  return absl::OkStatus();
}

absl::Status PrepareCheckpointDir(const std::string& ckpt_dir, const CheckpointMeta& meta) {
  std::error_code ec;
  const bool created = fs::create_directories(ckpt_dir, ec);
  if (ec) return ErrnoError(ec.value(), "create directory", ckpt_dir);
  if (created) {  // make the new directory's entry durable too
    const fs::path parent = fs::path(ckpt_dir).parent_path();
    RETURN_IF_ERROR(FsyncDirectory(parent.empty() ? "." : parent.string()));
  }
  RETURN_IF_ERROR(CheckNotStale(ckpt_dir, meta));
  // What dead writers left first: on a full disk that may be the space this write needs.
  SweepAbandonedScratchDirs(ckpt_dir);
  return absl::OkStatus();
}

absl::Status PublishCheckpoint(const std::string& ckpt_dir, const CheckpointMeta& meta,
                               const std::vector<SectionInfo>& sections, ScratchDir* scratch,
                               int keep) {
  const std::string manifest = EncodeManifest(meta, sections);
  uint32_t ignored_crc = 0;
  RETURN_IF_ERROR(WriteFileDurably(
      scratch->path() + "/" + kManifestFileName,
      absl::MakeConstSpan(reinterpret_cast<const uint8_t*>(manifest.data()), manifest.size()),
      &ignored_crc));
  // Checked again right before publishing: a newer leader may have written meanwhile.
  RETURN_IF_ERROR(CheckNotStale(ckpt_dir, meta));
  RETURN_IF_ERROR(scratch->RemoveLockFile());
  RETURN_IF_ERROR(FsyncDirectory(scratch->path()));
  const std::string final_name = StepDirName(meta.step);
  ASSIGN_OR_RETURN(const Published published,
                   Publish(ckpt_dir, scratch->path(), final_name, manifest));
  if (published == Published::kOurs) {
    scratch->Disown();
  } else {
    LogInfo(
        "checkpoint %s/%s was already written, byte for byte, by another writer of this "
        "directory: kept",
        ckpt_dir, final_name);
  }
  ApplyRetention(ckpt_dir, final_name, meta.step, keep);
  return absl::OkStatus();
}

}  // namespace rt::ckpt
