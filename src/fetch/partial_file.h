// PartialFile: one file of a data directory while it is being fetched, resumable after
// kill -9 without trusting a byte it has not checked.
//
// Bytes go to DIR/.fetch/NAME.part. After every append, DIR/.fetch/NAME.progress holds
//   ringtrain-fetch-progress 1 NAME SIZE BYTES PREFIX_CRC RECORD_CRC
// (PREFIX_CRC = CRC32C of the first BYTES bytes of the .part file, RECORD_CRC = CRC32C
// of the text before it; written to a temporary and renamed, not fsynced: kill -9 keeps
// the page cache, and after a power loss the checks below fail and the file starts
// over). Open() resumes only if the record is intact, names the same file and size,
// and the .part file's first BYTES bytes, read back from disk, have PREFIX_CRC; the
// .part file is then cut to BYTES (bytes written after the last record are dropped).
// Anything else starts from 0, and Open() says why in *note. The whole file is checked
// against the manifest only in Finish() (the manifest has one checksum per file), which
// renames it to DIR/NAME and removes the record (not fsynced: LocalData syncs every
// file once, before it writes the manifest).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "data/data_manifest.h"

namespace rt::fetch {

inline constexpr char kFetchDirName[] = ".fetch";  // inside the data directory

class PartialFile {
 public:
  // `size` is the file's exact size (from the manifest or the serving peer).
  static absl::StatusOr<std::unique_ptr<PartialFile>> Open(const std::string& dir,
                                                           const std::string& name, uint64_t size,
                                                           std::string* note);
  ~PartialFile();
  PartialFile(const PartialFile&) = delete;
  PartialFile& operator=(const PartialFile&) = delete;

  const std::string& name() const { return name_; }
  uint64_t size() const { return size_; }
  uint64_t bytes() const { return bytes_; }  // held and covered by the record
  const std::string& part_path() const { return part_path_; }

  // Writes `data` at bytes() (the only place it may go) and updates the record.
  // InvalidArgument if it would pass size().
  absl::Status Append(absl::Span<const uint8_t> data);
  // Requires bytes() == size(): verifies against `manifest` (data_files.h), then renames
  // to DIR/NAME. On a failed check the partial file starts over (bytes() == 0) and the
  // error names the file and what differs.
  absl::Status Finish(const data::DataManifest& manifest);
  // Drops every byte (after bytes from a peer proved bad).
  absl::Status Restart();

 private:
  PartialFile() = default;
  absl::Status WriteRecord();

  std::string dir_, name_, part_path_, record_path_;
  uint64_t size_ = 0;
  uint64_t bytes_ = 0;
  uint32_t prefix_crc_ = 0;
  int fd_ = -1;
};

}  // namespace rt::fetch
