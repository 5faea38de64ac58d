// Implementation of DocumentReader (see document_reader.h).
#include "data/document_reader.h"

#include "absl/strings/str_cat.h"
#include "core/log.h"
#include "core/status_macros.h"
#include "data/utf8.h"

namespace rt::data {
namespace {
constexpr size_t kMaxExamples = 5;
}

DocumentReader::DocumentReader(std::vector<InputFile> files, size_t max_chunk_bytes,
                               size_t max_segment_bytes)
    : files_(std::move(files)), max_chunk_(max_chunk_bytes), max_segment_(max_segment_bytes) {
  for (const InputFile& f : files_) disk_total_ += f.disk_bytes;
}

uint64_t DocumentReader::disk_bytes_done() const {
  return disk_done_ + (reader_ ? reader_->disk_bytes_read() : 0);
}

bool DocumentReader::Emit(TextChunk* chunk, bool ends_document) {
  chunk->text.swap(pending_);
  pending_.clear();
  chunk->ends_document = ends_document;
  stats_.text_bytes += chunk->text.size();
  if (ends_document) stats_.documents++;
  return true;
}

absl::StatusOr<bool> DocumentReader::Next(TextChunk* chunk) {
  while (true) {
    if (!reader_) {
      if (next_file_ == files_.size()) {
        if (!pending_.empty()) return Emit(chunk, true);
        return false;
      }
      ASSIGN_OR_RETURN(InputStream stream, InputStream::Open(files_[next_file_]));
      reader_.emplace(std::move(stream), max_segment_);
      stats_.files++;
      file_text_bytes_ = 0;
      in_long_line_ = skipping_line_ = false;
    }
    LineReader::Line line;
    ASSIGN_OR_RETURN(bool more, reader_->Next(&line));
    const InputFile& file = files_[next_file_];
    if (!more) {  // end of file: ends the document
      disk_done_ += reader_->disk_bytes_read();
      reader_.reset();
      ++next_file_;
      if (file_text_bytes_ == 0) {
        stats_.empty_files++;
        if (stats_.empty_examples.size() < kMaxExamples) stats_.empty_examples.push_back(file.path);
      }
      if (!pending_.empty()) return Emit(chunk, true);
      continue;
    }
    const bool continuation = in_long_line_;
    in_long_line_ = !line.complete;
    if (!continuation) skipping_line_ = false;
    if (line.text.empty() && line.complete && !continuation) {  // blank line
      if (!pending_.empty()) return Emit(chunk, true);
      continue;
    }
    if (!continuation) stats_.lines++;
    size_t bad = 0;
    if (skipping_line_ || !IsValidUtf8(line.text, &bad)) {
      if (!skipping_line_) {
        stats_.invalid_lines++;
        if (stats_.invalid_examples.size() < kMaxExamples) {
          stats_.invalid_examples.push_back(absl::StrCat(file.path, ":", line.line_no,
                                                         ": invalid UTF-8 at byte ", bad,
                                                         " of the line (line skipped)"));
        }
      }
      skipping_line_ = !line.complete;
      continue;
    }
    pending_.append(line.text.data(), line.text.size());
    file_text_bytes_ += line.text.size();
    if (line.complete) pending_.push_back('\n');
    if (pending_.size() >= max_chunk_) return Emit(chunk, false);
  }
}

}  // namespace rt::data
