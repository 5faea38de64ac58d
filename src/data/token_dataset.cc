// Implementation of TokenDataset and WriteTokenDataset (see token_dataset.h).
#include "data/token_dataset.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/crc32c.h"
#include "core/status_macros.h"
#include "data/durable_file.h"

namespace rt::data {
namespace {

// FNV-1a 64-bit: a stable, platform-independent hash for the fingerprint.
uint64_t Fnv1a64(absl::string_view s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

}  // namespace

absl::StatusOr<TokenDataset> TokenDataset::Open(const std::string& dir, absl::string_view split) {
  if (split != "train" && split != "val") {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown data split '", split, "' (expected train or val)"));
  }
  TokenDataset ds;
  ds.dir_ = dir;
  ds.split_ = std::string(split);
  std::string text;
  ASSIGN_OR_RETURN(ds.manifest_, ReadManifest(dir, &text));
  ds.fingerprint_ = absl::StrFormat("%016x", Fnv1a64(text));
  const DataManifest& m = ds.manifest_;
  if (!m.tokenizer_file.empty()) {
    const std::string tpath = ds.tokenizer_path();
    ASSIGN_OR_RETURN(std::string model, ReadWholeFile(tpath));
    if (Crc32c(model.data(), model.size()) != m.tokenizer_crc) {
      return absl::DataLossError(absl::StrCat("tokenizer ", tpath,
                                              " does not match the checksum in ", dir, "/",
                                              kManifestName, " (replaced or corrupt)"));
    }
  }
  ds.starts_.push_back(0);
  for (const ShardEntry& e : m.shards) {
    if (e.split != split) continue;
    const std::string path = dir + "/" + e.file;
    ASSIGN_OR_RETURN(TokenShard shard, TokenShard::Open(path));
    auto mismatch = [&](const std::string& what) {
      return absl::DataLossError(absl::StrCat("token shard ", path, " does not match ", dir, "/",
                                              kManifestName, ": ", what));
    };
    if (shard.size() != e.tokens) {
      return mismatch(absl::StrFormat("%d tokens, manifest says %d", shard.size(), e.tokens));
    }
    if (shard.vocab_size() != m.vocab_size) {
      return mismatch(
          absl::StrFormat("vocab %d, manifest says %d", shard.vocab_size(), m.vocab_size));
    }
    if (shard.token_bytes() != m.token_bytes) {
      return mismatch(
          absl::StrFormat("%d-byte tokens, manifest says %d", shard.token_bytes(), m.token_bytes));
    }
    if (shard.payload_crc() != e.crc) return mismatch("different checksum");
    ds.source_bytes_ += e.source_bytes;
    ds.documents_ += e.documents;
    ds.starts_.push_back(ds.starts_.back() + shard.size());
    ds.shards_.push_back(std::move(shard));
  }
  return ds;
}

std::string TokenDataset::tokenizer_path() const {
  return manifest_.tokenizer_file.empty() ? "" : dir_ + "/" + manifest_.tokenizer_file;
}

void TokenDataset::Read(uint64_t pos, size_t n, int32_t* out) const {
  const uint64_t total = num_tokens();
  if (pos > total || n > total - pos) {
    std::fprintf(stderr,
                 "TokenDataset::Read(%llu, %zu) past the end of %s split %s (%llu tokens)\n",
                 static_cast<unsigned long long>(pos), n, dir_.c_str(), split_.c_str(),
                 static_cast<unsigned long long>(total));
    std::abort();
  }
  // Shard i holds [starts_[i], starts_[i+1]); find the last start <= pos.
  size_t i =
      static_cast<size_t>(std::upper_bound(starts_.begin(), starts_.end(), pos) - starts_.begin()) -
      1;
  while (n > 0) {
    while (starts_[i + 1] == pos) ++i;  // skip empty shards / shard ends
    const uint64_t in_shard = pos - starts_[i];
    const size_t take = static_cast<size_t>(std::min<uint64_t>(n, starts_[i + 1] - pos));
    shards_[i].Read(in_shard, take, out);
    out += take;
    pos += take;
    n -= take;
  }
}

absl::Status WriteTokenDataset(const std::string& dir, int vocab_size,
                               absl::Span<const uint32_t> train, absl::Span<const uint32_t> val,
                               uint64_t train_source_bytes, uint64_t val_source_bytes) {
  RETURN_IF_ERROR(MakeDirs(dir));
  DataManifest m;
  m.vocab_size = vocab_size;
  m.token_bytes = TokenBytesForVocab(vocab_size);
  m.eot_id = -1;
  struct Part {
    const char* split;
    absl::Span<const uint32_t> tokens;
    uint64_t source_bytes;
  };
  for (const Part& p :
       {Part{"train", train, train_source_bytes}, Part{"val", val, val_source_bytes}}) {
    ShardEntry e;
    e.split = p.split;
    e.file = absl::StrCat(p.split, "-00000.bin");
    ASSIGN_OR_RETURN(TokenShardWriter w,
                     TokenShardWriter::Create(dir + "/" + e.file, vocab_size, m.token_bytes));
    RETURN_IF_ERROR(w.Append(p.tokens));
    RETURN_IF_ERROR(w.Finish());
    e.tokens = w.tokens_written();
    e.source_bytes = p.source_bytes;
    e.crc = w.payload_crc();
    m.shards.push_back(e);
  }
  return WriteManifest(dir, m);
}

}  // namespace rt::data
