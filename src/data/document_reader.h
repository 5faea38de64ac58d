// Documents out of input files, for `prepare`: documents are separated by blank lines
// (and by file ends); a document's text is its lines, each followed by "\n". Lines that
// are not valid UTF-8 are skipped and counted (the first few are kept as examples with
// file and line). A document longer than max_chunk_bytes comes out in several chunks,
// cut only between lines (or line segments, see LineReader), so memory stays bounded.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "data/text_input.h"

namespace rt::data {

struct TextChunk {
  std::string text;            // lines with "\n"; never empty
  bool ends_document = false;  // the last chunk of its document
};

struct ReadStats {
  uint64_t files = 0;
  uint64_t empty_files = 0;  // files that held no valid text
  uint64_t lines = 0;        // non-blank lines (segments of over-long lines count once each)
  uint64_t invalid_lines = 0;
  uint64_t documents = 0;
  uint64_t text_bytes = 0;                    // bytes of all emitted chunk text
  std::vector<std::string> invalid_examples;  // "path:line: invalid UTF-8 at byte N", first 5
  std::vector<std::string> empty_examples;    // first 5 empty files
};

class DocumentReader {
 public:
  static constexpr size_t kDefaultMaxChunkBytes = 4 << 20;
  explicit DocumentReader(std::vector<InputFile> files,
                          size_t max_chunk_bytes = kDefaultMaxChunkBytes,
                          size_t max_segment_bytes = LineReader::kDefaultMaxSegmentBytes);

  // Fills *chunk with the next chunk; returns false at the end of all files.
  absl::StatusOr<bool> Next(TextChunk* chunk);
  // Bytes of the input files consumed so far (on-disk sizes: compressed for .zst).
  uint64_t disk_bytes_done() const;
  uint64_t disk_bytes_total() const { return disk_total_; }
  const ReadStats& stats() const { return stats_; }

 private:
  bool Emit(TextChunk* chunk, bool ends_document);
  std::vector<InputFile> files_;
  size_t max_chunk_, max_segment_;
  size_t next_file_ = 0;
  std::optional<LineReader> reader_;
  std::string pending_;
  bool in_long_line_ = false;     // previous segment was incomplete
  bool skipping_line_ = false;    // the current over-long line had an invalid segment
  uint64_t file_text_bytes_ = 0;  // valid text seen in the current file
  uint64_t disk_done_ = 0;        // bytes of finished files
  uint64_t disk_total_ = 0;
  ReadStats stats_;
};

}  // namespace rt::data
