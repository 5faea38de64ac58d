// `ringtrain prepare` as a library call: raw text files in, a data directory out
// (tokenizer.model, token shards, manifest.txt; formats in data_manifest.h and
// token_shard.h).
//
// Phases: (1) unless a tokenizer is given, a bounded random sample of lines
// (text_sampler.h) trains a SentencePiece BPE model (tokenizer_trainer.h);
// (2) one reader thread cuts the input into documents and batches of ~1 MB of text,
// `threads` workers encode batches in parallel, and one writer thread takes the results
// in input order, appends each document's tokens + end-of-text to the train or val
// shards and rolls shards at `shard_tokens`. At most 4 x threads batches are in flight,
// so memory does not depend on the input size, and the output does not depend on the
// thread count. A document goes to val when hash(seed, document index) < val_fraction.
// The manifest is written last; a rerun first deletes the old manifest and shards.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "data/document_reader.h"

namespace rt::data {

struct PrepareProgress {
  const char* phase = "";    // "sampling" | "encoding" | "comparing"
  uint64_t done_bytes = 0;   // input bytes on disk consumed (compressed for .zst)
  uint64_t total_bytes = 0;  // input bytes on disk in all files
  uint64_t text_bytes = 0;   // encoding: decompressed text bytes read so far
};

struct PrepareOptions {
  std::vector<std::string> inputs;  // files and/or directories
  std::string out_dir;
  int vocab_size = 32000;  // when training a tokenizer
  double val_fraction = 0.005;
  std::string tokenizer_path;  // existing .model to use instead of training one
  std::string license;         // licence of the input text, recorded in the manifest ("": none)
  uint64_t shard_tokens = 100'000'000;
  uint64_t sample_bytes = 64ull << 20;  // tokenizer training sample budget
  int threads = 1;                      // encoding workers (and SentencePiece trainer threads)
  uint64_t seed = 1337;
  bool compare_spm = false;  // also time single-thread SentencePiece encoding of the input
  // Called from the reading thread, often (the caller rate-limits its output).
  std::function<void(const PrepareProgress&)> progress;
};

struct PrepareSummary {
  ReadStats read;
  int vocab_size = 0;
  int token_bytes = 0;
  int eot_id = -1;
  bool trained_tokenizer = false;
  uint64_t sample_bytes = 0, sample_lines = 0;
  double tokenizer_seconds = 0;   // sampling + training
  double encode_seconds = 0;      // phase 2 wall time (read + encode + write)
  double encode_cpu_seconds = 0;  // phase 2 CPU time of all threads (robust to a busy host)
  double total_seconds = 0;
  uint64_t train_tokens = 0, val_tokens = 0, train_bytes = 0, val_bytes = 0;
  uint64_t train_documents = 0, val_documents = 0, shards = 0;
  int threads = 1;
  // compare_spm: single-thread SentencePieceProcessor::Encode over the same chunks.
  double spm_encode_seconds = 0;
  double spm_encode_cpu_seconds = 0;
  uint64_t spm_bytes = 0;
};

absl::StatusOr<PrepareSummary> RunPrepare(const PrepareOptions& options);

}  // namespace rt::data
