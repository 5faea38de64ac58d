// LocalData: what this peer holds of the data directory, shared by the fetcher (which
// adds to it) and the data server (which serves from it, relaying bytes it has not
// finished fetching). Thread-safe.
//
// A directory is complete when DIR/manifest.txt parses and every file it lists exists
// with its expected size; their contents are checked when first served (and, in
// `train`, by the dataset). While a fetch runs, the manifest waits in
// DIR/.fetch/manifest.txt, verified whole files are renamed into DIR as they finish,
// and DIR/manifest.txt (the exact bytes received, so the data fingerprint matches) is
// written last, as `prepare` does: a directory with a manifest is complete.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "data/data_manifest.h"
#include "fetch/data_files.h"

namespace rt::fetch {

class LocalData {
 public:
  // Looks at `dir` (which may not exist yet). Files present whole when a fetch resumes
  // (DIR has no manifest, DIR/.fetch has one) are verified now: a bad one is removed.
  static absl::StatusOr<std::shared_ptr<LocalData>> Open(const std::string& dir);

  const std::string& dir() const { return dir_; }
  bool complete() const;
  bool has_manifest() const;
  std::string manifest_text() const;                   // "" until known
  std::optional<data::DataManifest> manifest() const;  // nullopt until known
  std::vector<DataFile> missing_files() const;         // listed, not yet whole here
  uint64_t have_bytes() const;
  uint64_t total_bytes() const;  // 0 until the manifest is known

  // ---- the fetcher ----
  // Takes the manifest a peer sent: it must parse, and equal the one held, if any
  // (FailedPrecondition naming `from` otherwise). Stored in DIR/.fetch.
  absl::Status AdoptManifest(const std::string& text, const std::string& from);
  void SetFetching(bool fetching);
  // `name` is being fetched: `size` bytes in all, the first `bytes` readable at `path`;
  // `generation` changes whenever its bytes start over.
  void Progress(const std::string& name, uint64_t size, uint64_t bytes, const std::string& path,
                uint64_t generation);
  void FileDone(const std::string& name, bool verified);  // now DIR/name, whole
  // Every file is whole: writes DIR/manifest.txt and removes DIR/.fetch.
  absl::Status MarkComplete();

  // ---- the server ----
  // Waits up to `timeout` for a manifest while this peer fetches; the text or "".
  std::string WaitForManifest(absl::Duration timeout) const;
  struct FileView {
    bool known = false;  // listed and size known (fetch begun or whole)
    bool whole = false;
    uint64_t size = 0;
    uint64_t bytes = 0;  // readable at path
    std::string path;
    uint64_t generation = 0;
  };
  // Returns once `name` has more than `offset` readable bytes or is whole, or after
  // `stall` without progress on any file here; view.known false if it is not listed.
  FileView WaitFor(const std::string& name, uint64_t offset, absl::Duration stall) const;
  // A whole file this peer did not fetch itself is verified once before it is served;
  // DataLoss naming the file (and nothing is sent) if it is corrupt.
  absl::Status CheckServable(const std::string& name);

 private:
  struct FileState {
    uint64_t size = 0;
    uint64_t bytes = 0;
    std::string path;
    bool whole = false;
    bool verified = false;
    bool known = false;
    uint64_t generation = 0;
    std::string corrupt;  // why, once found corrupt here
  };
  explicit LocalData(std::string dir) : dir_(std::move(dir)) {}
  void SetManifestLocked(const std::string& text, data::DataManifest m);
  absl::Status MarkCompleteLocked();

  const std::string dir_;
  mutable std::mutex mu_;
  mutable std::condition_variable cv_;
  std::string manifest_text_;
  std::optional<data::DataManifest> manifest_;
  std::vector<DataFile> files_;
  std::map<std::string, FileState> state_;
  bool complete_ = false;
  bool fetching_ = false;
  absl::Time last_progress_ = absl::Now();
};

}  // namespace rt::fetch
