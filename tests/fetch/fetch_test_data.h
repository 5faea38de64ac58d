// Test helper for the fetch layer: a small prepared data directory (two train shards,
// one val shard, a tokenizer file) written with the data layer's own writers.
#pragma once

#include <string>
#include <vector>

#include <doctest/doctest.h>

#include "../temp_dir.h"
#include "core/crc32c.h"
#include "data/data_manifest.h"
#include "data/durable_file.h"
#include "data/token_shard.h"

namespace rt::fetch::testing {

using ::rt::testing::ReadFile;
using ::rt::testing::TempDir;
using ::rt::testing::WriteFile;

// Writes `dir` with shards of `tokens` tokens each (vocab 1000), returns its manifest.
inline data::DataManifest WriteSmallDataDir(const std::string& dir, uint64_t tokens = 300000) {
  REQUIRE(data::MakeDirs(dir).ok());
  data::DataManifest m;
  m.vocab_size = 1000;
  m.token_bytes = 2;
  m.eot_id = 0;
  const std::string tok = "not really a sentencepiece model, but bytes with a checksum";
  WriteFile(dir + "/tokenizer.model", tok);
  m.tokenizer_file = "tokenizer.model";
  m.tokenizer_crc = Crc32c(tok.data(), tok.size());
  const char* names[] = {"train-00000.bin", "train-00001.bin", "val-00000.bin"};
  for (int s = 0; s < 3; ++s) {
    absl::StatusOr<data::TokenShardWriter> w =
        data::TokenShardWriter::Create(dir + "/" + names[s], m.vocab_size, 2);
    REQUIRE(w.ok());
    std::vector<uint32_t> t(tokens);
    for (uint64_t i = 0; i < tokens; ++i) t[i] = static_cast<uint32_t>((i * 31 + s * 7) % 1000);
    REQUIRE(w->Append(t).ok());
    REQUIRE(w->Finish().ok());
    data::ShardEntry e;
    e.split = s < 2 ? "train" : "val";
    e.file = names[s];
    e.tokens = tokens;
    e.source_bytes = tokens * 4;
    e.documents = 1;
    e.crc = w->payload_crc();
    m.shards.push_back(e);
  }
  REQUIRE(data::WriteManifest(dir, m).ok());
  return m;
}

}  // namespace rt::fetch::testing
