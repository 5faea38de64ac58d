// Implementation of the prepare pipeline (see prepare_pipeline.h).
#include "data/prepare_pipeline.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <filesystem>
#include <map>
#include <mutex>
#include <thread>

#include <time.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/crc32c.h"
#include "core/log.h"
#include "core/status_copy.h"
#include "core/status_macros.h"
#include "data/data_manifest.h"
#include "data/durable_file.h"
#include "data/shard_sink.h"
#include "data/spm_bridge.h"
#include "data/text_sampler.h"
#include "data/token_dataset.h"
#include "data/tokenizer.h"
#include "data/tokenizer_trainer.h"

namespace rt::data {
namespace {

constexpr char kTokenizerName[] = "tokenizer.model";
constexpr size_t kBatchBytes = 1 << 20;

using Clock = std::chrono::steady_clock;
double SecondsSince(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// CPU seconds used by the process (all threads) or by the calling thread.
double CpuSeconds(clockid_t clock) {
  timespec ts;
  ::clock_gettime(clock, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

uint64_t SplitMix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

bool IsValDocument(uint64_t seed, uint64_t doc_index, double val_fraction) {
  if (val_fraction <= 0) return false;
  if (val_fraction >= 1) return true;
  const double u = static_cast<double>(SplitMix64(SplitMix64(seed) ^ doc_index) >> 11) * 0x1.0p-53;
  return u < val_fraction;
}

// Deletes what an earlier (possibly interrupted) run left: the manifest first, so the
// directory never looks complete while shards change.
absl::Status ClearOutputDir(const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::remove(dir + "/" + kManifestName, ec);
  if (ec)
    return absl::InternalError(
        absl::StrCat("cannot remove old manifest in ", dir, ": ", ec.message()));
  RETURN_IF_ERROR(SyncParentDir(dir + "/" + kManifestName));
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    const bool ours = absl::EndsWith(name, ".tmp") ||
                      ((absl::StartsWith(name, "train-") || absl::StartsWith(name, "val-")) &&
                       absl::EndsWith(name, ".bin"));
    if (ours) fs::remove(entry.path(), ec);
  }
  if (ec) return absl::InternalError(absl::StrCat("cannot clean ", dir, ": ", ec.message()));
  return absl::OkStatus();
}

struct EncodedChunk {
  std::vector<uint32_t> tokens;  // with the eot appended when the chunk ends a document
  uint64_t source_bytes = 0;
  bool ends_document = false;
};

// The reader -> workers -> writer machinery of phase 2.
class EncodePipeline {
 public:
  EncodePipeline(const Tokenizer& tok, int threads, std::function<absl::Status(EncodedChunk&)> sink)
      : tok_(tok), threads_(std::max(1, threads)), sink_(std::move(sink)) {}

  // Reads everything from `reader`, calling progress after each batch.
  absl::Status Run(DocumentReader& reader, const std::function<void()>& progress) {
    std::vector<std::thread> workers;
    for (int i = 0; i < threads_; ++i) workers.emplace_back([this] { WorkerLoop(); });
    std::thread writer([this] { WriterLoop(); });
    absl::Status read_status = ReadLoop(reader, progress);
    {
      std::lock_guard<std::mutex> lock(mu_);
      reading_done_ = true;
      if (!read_status.ok()) Fail(read_status);
    }
    cv_.notify_all();
    for (std::thread& t : workers) t.join();
    writer.join();
    std::lock_guard<std::mutex> lock(mu_);
    return FreshCopy(error_);
  }

 private:
  struct Batch {
    uint64_t seq = 0;
    std::vector<TextChunk> chunks;
  };

  void Fail(const absl::Status& st) {         // mu_ held
    if (error_.ok()) error_ = FreshCopy(st);  // set by any worker
  }

  absl::Status ReadLoop(DocumentReader& reader, const std::function<void()>& progress) {
    Batch batch;
    size_t batch_bytes = 0;
    auto submit = [&]() -> bool {
      std::unique_lock<std::mutex> lock(mu_);
      // Bound the batches in flight (queued, being encoded, or waiting for the writer).
      cv_.wait(lock, [&] { return !error_.ok() || next_seq_ - written_ < 4u * threads_; });
      if (!error_.ok()) return false;
      batch.seq = next_seq_++;
      work_.push_back(std::move(batch));
      batch = Batch();
      batch_bytes = 0;
      cv_.notify_all();
      return true;
    };
    while (true) {
      TextChunk chunk;
      ASSIGN_OR_RETURN(bool more, reader.Next(&chunk));
      if (!more) break;
      batch_bytes += chunk.text.size();
      batch.chunks.push_back(std::move(chunk));
      if (batch_bytes >= kBatchBytes) {
        if (!submit()) return absl::OkStatus();  // the error is already recorded
        if (progress) progress();
      }
    }
    if (!batch.chunks.empty()) submit();
    if (progress) progress();
    return absl::OkStatus();
  }

  void WorkerLoop() {
    while (true) {
      Batch batch;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] { return !work_.empty() || reading_done_ || !error_.ok(); });
        if (!error_.ok() || work_.empty()) return;
        batch = std::move(work_.front());
        work_.pop_front();
      }
      std::vector<EncodedChunk> out(batch.chunks.size());
      std::vector<int> ids;
      for (size_t i = 0; i < batch.chunks.size(); ++i) {
        const TextChunk& c = batch.chunks[i];
        std::string err = tok_.model().Encode(c.text, &ids);
        if (!err.empty()) {
          std::lock_guard<std::mutex> lock(mu_);
          Fail(absl::InternalError("SentencePiece encode failed: " + err));
          cv_.notify_all();
          return;
        }
        out[i].tokens.assign(ids.begin(), ids.end());
        if (c.ends_document) out[i].tokens.push_back(static_cast<uint32_t>(tok_.eot_id()));
        out[i].source_bytes = c.text.size();
        out[i].ends_document = c.ends_document;
      }
      std::lock_guard<std::mutex> lock(mu_);
      done_.emplace(batch.seq, std::move(out));
      cv_.notify_all();
    }
  }

  void WriterLoop() {
    while (true) {
      std::vector<EncodedChunk> chunks;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] {
          return !error_.ok() || done_.count(written_) > 0 ||
                 (reading_done_ && written_ == next_seq_);
        });
        if (!error_.ok() || (done_.count(written_) == 0)) return;
        auto it = done_.find(written_);
        chunks = std::move(it->second);
        done_.erase(it);
      }
      for (EncodedChunk& c : chunks) {
        absl::Status st = sink_(c);
        if (!st.ok()) {
          std::lock_guard<std::mutex> lock(mu_);
          Fail(st);
          cv_.notify_all();
          return;
        }
      }
      std::lock_guard<std::mutex> lock(mu_);
      ++written_;
      cv_.notify_all();
    }
  }

  const Tokenizer& tok_;
  const int threads_;
  std::function<absl::Status(EncodedChunk&)> sink_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Batch> work_;
  std::map<uint64_t, std::vector<EncodedChunk>> done_;
  uint64_t next_seq_ = 0;  // batches submitted
  uint64_t written_ = 0;   // batches consumed by the writer
  bool reading_done_ = false;
  absl::Status error_;
};

absl::StatusOr<Tokenizer> ObtainTokenizer(const PrepareOptions& o,
                                          const std::vector<InputFile>& files,
                                          PrepareSummary* summary, uint32_t* model_crc) {
  const std::string out_path = o.out_dir + "/" + kTokenizerName;
  std::string model_bytes;
  if (!o.tokenizer_path.empty()) {
    ASSIGN_OR_RETURN(model_bytes, ReadWholeFile(o.tokenizer_path));
  } else {
    const auto start = Clock::now();
    auto progress = [&](uint64_t done, uint64_t total) {
      if (o.progress) o.progress(PrepareProgress{"sampling", done, total});
    };
    ASSIGN_OR_RETURN(TextSample sample, SampleLines(files, o.sample_bytes, o.seed, progress));
    if (sample.lines.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("the input holds no valid UTF-8 text to train a tokenizer on (",
                       files.size(), " file(s))"));
    }
    summary->sample_bytes = sample.bytes;
    summary->sample_lines = sample.lines.size();
    LogInfo("training a %d-token BPE tokenizer on a sample of %.1f MB (%d of %d lines)",
            o.vocab_size, sample.bytes / 1e6, sample.lines.size(), sample.lines_seen);
    ASSIGN_OR_RETURN(model_bytes, TrainTokenizer(sample.lines, {o.vocab_size, o.threads}));
    summary->trained_tokenizer = true;
    summary->tokenizer_seconds = SecondsSince(start);
  }
  auto tok = Tokenizer::FromSerialized(model_bytes);
  if (!tok.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("tokenizer ", o.tokenizer_path, ": ", tok.status().message()));
  }
  if (tok->eot_id() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("tokenizer ", o.tokenizer_path, " has neither a '", kEotPiece,
                     "' nor a '</s>' control symbol to end documents with"));
  }
  RETURN_IF_ERROR(WriteFileAtomically(out_path, model_bytes));
  *model_crc = Crc32c(model_bytes.data(), model_bytes.size());
  return tok;
}

}  // namespace

absl::StatusOr<PrepareSummary> RunPrepare(const PrepareOptions& o) {
  const auto start = Clock::now();
  PrepareSummary summary;
  summary.threads = std::max(1, o.threads);
  if (o.inputs.empty()) return absl::InvalidArgumentError("no input given (--input PATH...)");
  if (o.out_dir.empty()) return absl::InvalidArgumentError("no output directory given (--out DIR)");
  if (!(o.val_fraction >= 0 && o.val_fraction <= 1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("val fraction ", o.val_fraction, " is not in [0, 1]"));
  }
  if (o.shard_tokens == 0) return absl::InvalidArgumentError("shard tokens must be positive");
  ASSIGN_OR_RETURN(std::vector<InputFile> files, ListInputFiles(o.inputs));
  if (files.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "no input files: found no .txt or .zst files in ", absl::StrJoin(o.inputs, ", ")));
  }
  RETURN_IF_ERROR(MakeDirs(o.out_dir));
  RETURN_IF_ERROR(ClearOutputDir(o.out_dir));

  uint32_t model_crc = 0;
  ASSIGN_OR_RETURN(Tokenizer tok, ObtainTokenizer(o, files, &summary, &model_crc));
  summary.vocab_size = tok.vocab_size();
  summary.token_bytes = TokenBytesForVocab(summary.vocab_size);
  summary.eot_id = tok.eot_id();

  // Phase 2: encode.
  const auto encode_start = Clock::now();
  const double encode_cpu_start = CpuSeconds(CLOCK_PROCESS_CPUTIME_ID);
  ShardSink train(o.out_dir, "train", summary.vocab_size, summary.token_bytes, o.shard_tokens);
  ShardSink val(o.out_dir, "val", summary.vocab_size, summary.token_bytes, o.shard_tokens);
  uint64_t doc_index = 0;
  auto sink = [&](EncodedChunk& c) -> absl::Status {
    const bool to_val = IsValDocument(o.seed, doc_index, o.val_fraction);
    if (c.ends_document) ++doc_index;
    ShardSink& s = to_val ? val : train;
    return s.Append(c.tokens.data(), c.tokens.size(), c.source_bytes, c.ends_document);
  };
  DocumentReader reader(files);
  auto progress = [&] {
    if (o.progress) {
      o.progress(PrepareProgress{"encoding", reader.disk_bytes_done(), reader.disk_bytes_total(),
                                 reader.stats().text_bytes});
    }
  };
  EncodePipeline pipeline(tok, summary.threads, sink);
  RETURN_IF_ERROR(pipeline.Run(reader, progress));
  DataManifest manifest;
  manifest.vocab_size = summary.vocab_size;
  manifest.token_bytes = summary.token_bytes;
  manifest.eot_id = summary.eot_id;
  manifest.tokenizer_file = kTokenizerName;
  manifest.tokenizer_crc = model_crc;
  manifest.license = o.license;
  RETURN_IF_ERROR(train.Finish(&manifest.shards));
  RETURN_IF_ERROR(val.Finish(&manifest.shards));
  summary.encode_seconds = SecondsSince(encode_start);
  summary.encode_cpu_seconds = CpuSeconds(CLOCK_PROCESS_CPUTIME_ID) - encode_cpu_start;
  summary.read = reader.stats();
  summary.train_tokens = train.tokens();
  summary.val_tokens = val.tokens();
  summary.train_bytes = train.source_bytes();
  summary.val_bytes = val.source_bytes();
  summary.train_documents = train.documents();
  summary.val_documents = val.documents();
  summary.shards = manifest.shards.size();
  if (summary.train_tokens == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("the input holds no valid text (", summary.read.files, " file(s), ",
                     summary.read.invalid_lines, " invalid line(s)); nothing written"));
  }
  RETURN_IF_ERROR(WriteManifest(o.out_dir, manifest));

  if (o.compare_spm) {
    // The same chunks, encoded by SentencePiece alone in this thread; only Encode is timed.
    DocumentReader again(files);
    TextChunk chunk;
    std::vector<int> ids;
    double seconds = 0;
    while (true) {
      ASSIGN_OR_RETURN(bool more, again.Next(&chunk));
      if (!more) break;
      const auto t = Clock::now();
      const double cpu = CpuSeconds(CLOCK_THREAD_CPUTIME_ID);
      std::string err = tok.model().Encode(chunk.text, &ids);
      seconds += SecondsSince(t);
      summary.spm_encode_cpu_seconds += CpuSeconds(CLOCK_THREAD_CPUTIME_ID) - cpu;
      if (!err.empty()) return absl::InternalError("SentencePiece encode failed: " + err);
      summary.spm_bytes += chunk.text.size();
      if (o.progress) {
        o.progress(PrepareProgress{"comparing", again.disk_bytes_done(), again.disk_bytes_total()});
      }
    }
    summary.spm_encode_seconds = seconds;
  }
  summary.total_seconds = SecondsSince(start);
  return summary;
}

}  // namespace rt::data
