// Input text for `prepare`: finding the files (files and directories, recursively),
// reading them as plain bytes or streaming zstd, and splitting them into lines.
#pragma once

#include <zstd.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace rt::data {

struct InputFile {
  std::string path;
  uint64_t disk_bytes = 0;  // size on disk (compressed size for .zst): the progress unit
  bool zstd = false;        // name ends in ".zst"
};

// Expands `paths`: a file is taken whatever its name; a directory contributes every
// regular file below it (recursively, symlinks followed) whose name ends in ".txt" or
// ".zst", in sorted path order so the result is the same on every run. A path that
// does not exist or cannot be read is an error naming it. Duplicates are dropped.
absl::StatusOr<std::vector<InputFile>> ListInputFiles(const std::vector<std::string>& paths);

// Sequential bytes of one input file, decompressed when it is zstd. Move-only.
class InputStream {
 public:
  static absl::StatusOr<InputStream> Open(const InputFile& file);
  InputStream(InputStream&&) noexcept;
  InputStream& operator=(InputStream&&) noexcept;
  ~InputStream();

  // Fills up to `cap` bytes; 0 at the end. Errors name the file (e.g. corrupt or
  // truncated zstd data with its offset).
  absl::StatusOr<size_t> Read(char* buf, size_t cap);
  uint64_t disk_bytes_read() const { return disk_read_; }  // progress, in file bytes

 private:
  InputStream() = default;
  absl::StatusOr<size_t> ReadDisk(char* buf, size_t cap);
  std::string path_;
  int fd_ = -1;
  ZSTD_DStream* zstd_ = nullptr;
  std::vector<char> in_buf_;
  ZSTD_inBuffer in_{nullptr, 0, 0};
  bool disk_eof_ = false;
  size_t last_ret_ = 0;  // last ZSTD_decompressStream result (0 = frame complete)
  uint64_t disk_read_ = 0;
};

// Splits an InputStream into lines. A line longer than max_segment_bytes is returned in
// segments (complete == false for all but the last), cut just before a space when there
// is one in the last quarter of the segment, else at a UTF-8 character boundary, so memory
// stays bounded for any input. A trailing "\r" is removed from complete lines.
class LineReader {
 public:
  static constexpr size_t kDefaultMaxSegmentBytes = 1 << 20;
  LineReader(InputStream stream, size_t max_segment_bytes = kDefaultMaxSegmentBytes);

  struct Line {
    absl::string_view text;  // without the newline; valid until the next call
    uint64_t line_no = 0;    // 1-based line of the file where the segment starts
    bool complete = true;    // false: the line continues in the next segment
  };
  // Returns false at the end of the file.
  absl::StatusOr<bool> Next(Line* line);
  uint64_t disk_bytes_read() const { return stream_.disk_bytes_read(); }

 private:
  InputStream stream_;
  size_t max_segment_;
  std::string buf_;
  size_t begin_ = 0;  // start of unread data in buf_
  bool eof_ = false;
  uint64_t line_no_ = 1;
};

}  // namespace rt::data
