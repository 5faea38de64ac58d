// `prepare` end to end on tiny corpora written by the test: same shards for any thread
// count, documents never split between train and val, .zst and directory inputs,
// invalid UTF-8 skipped and counted, clear errors, reruns leave no stale files.
#include "data/prepare_pipeline.h"

#include <doctest/doctest.h>
#include <zstd.h>

#include <cstdio>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "data/temp_dir.h"
#include "data/token_dataset.h"
#include "data/tokenizer.h"
#include "data/vietnamese_text.h"

namespace rt::data {
namespace {

using testing::ReadFile;
using testing::TempDir;
using testing::WriteFile;

// `n` distinct documents of 1..4 lines; each names its index so it is unique.
std::vector<std::string> Documents(int n) {
  std::vector<std::string> lines = testing::VietnameseLines(4 * n);
  std::vector<std::string> docs;
  for (int i = 0; i < n; ++i) {
    std::string d = "Bài số " + std::to_string(i) + "\n";
    for (int k = 0; k < i % 4; ++k) d += lines[4 * i + k] + "\n";
    docs.push_back(d);
  }
  return docs;
}

std::string Corpus(const std::vector<std::string>& docs) {
  std::string s;
  for (const std::string& d : docs) s += d + "\n";  // blank line after each document
  return s;
}

std::string Zstd(const std::string& raw) {
  std::string out(ZSTD_compressBound(raw.size()), '\0');
  size_t n = ZSTD_compress(out.data(), out.size(), raw.data(), raw.size(), 3);
  REQUIRE_FALSE(ZSTD_isError(n));
  out.resize(n);
  return out;
}

PrepareOptions Options(const std::string& in, const std::string& out) {
  PrepareOptions o;
  o.inputs = {in};
  o.out_dir = out;
  o.vocab_size = 400;
  o.val_fraction = 0.2;
  o.shard_tokens = 700;
  o.sample_bytes = 1 << 20;
  o.threads = 1;
  return o;
}

std::vector<int32_t> AllTokens(const TokenDataset& ds) {
  std::vector<int32_t> t(ds.num_tokens());
  if (!t.empty()) ds.Read(0, t.size(), t.data());
  return t;
}

// Decodes a split into its documents (text between end-of-text tokens).
std::vector<std::string> DecodeDocuments(const TokenDataset& ds, const Tokenizer& tok) {
  std::vector<std::string> docs;
  std::vector<int> cur;
  for (int32_t id : AllTokens(ds)) {
    if (id == ds.eot_id()) {
      docs.push_back(tok.Decode(cur));
      cur.clear();
    } else {
      cur.push_back(id);
    }
  }
  CHECK(cur.empty());  // every split ends with an end-of-text token
  return docs;
}

TEST_CASE("identical output for 1 and 2 threads, several shards") {
  TempDir tmp;
  WriteFile(tmp / "corpus.txt", Corpus(Documents(120)));
  std::map<int, std::map<std::string, std::string>> files;  // threads -> name -> bytes
  for (int threads : {1, 2}) {
    PrepareOptions o = Options(tmp / "corpus.txt", tmp / ("out" + std::to_string(threads)));
    o.threads = threads;
    auto s = RunPrepare(o);
    REQUIRE_MESSAGE(s.ok(), s.status().ToString());
    CHECK(s->shards >= 4);
    for (const auto& e : std::filesystem::directory_iterator(o.out_dir)) {
      files[threads][e.path().filename().string()] = ReadFile(e.path().string());
    }
  }
  CHECK(files[1].size() >= 5);
  REQUIRE(files[1].size() == files[2].size());
  for (const auto& [name, bytes] : files[1]) {
    CHECK_MESSAGE(bytes == files[2][name], name);  // shards, manifest, tokenizer byte for byte
  }
}

TEST_CASE("train/val split keeps whole documents -- counts and source bytes add up") {
  TempDir tmp;
  const std::vector<std::string> docs = Documents(80);
  WriteFile(tmp / "corpus.txt", Corpus(docs));
  PrepareOptions o = Options(tmp / "corpus.txt", tmp / "out");
  o.shard_tokens = 300;  // documents cross shard boundaries
  auto s = RunPrepare(o);
  REQUIRE_MESSAGE(s.ok(), s.status().ToString());
  auto train = TokenDataset::Open(o.out_dir, "train");
  auto val = TokenDataset::Open(o.out_dir, "val");
  REQUIRE(train.ok());
  REQUIRE(val.ok());
  auto tok = Tokenizer::Load(train->tokenizer_path());
  REQUIRE(tok.ok());
  CHECK(train->eot_id() == tok->eot_id());
  CHECK(train->vocab_size() == tok->vocab_size());
  std::vector<std::string> t = DecodeDocuments(*train, *tok), v = DecodeDocuments(*val, *tok);
  CHECK(t.size() == train->num_documents());
  CHECK(v.size() == val->num_documents());
  CHECK(v.size() > 0);
  CHECK(t.size() + v.size() == docs.size());
  // In input order, each split is a subsequence of the documents, each document intact.
  size_t ti = 0, vi = 0;
  uint64_t tbytes = 0, vbytes = 0;
  for (const std::string& d : docs) {
    if (ti < t.size() && t[ti] == d) {
      ++ti;
      tbytes += d.size();
    } else if (vi < v.size() && v[vi] == d) {
      ++vi;
      vbytes += d.size();
    }
  }
  CHECK(ti == t.size());
  CHECK(vi == v.size());
  CHECK(train->source_bytes() == tbytes);
  CHECK(val->source_bytes() == vbytes);
}

TEST_CASE("zst input gives the same tokens as the plain text -- directories are searched") {
  TempDir tmp;
  const std::string text = Corpus(Documents(40));
  std::filesystem::create_directories(tmp / "plain");
  std::filesystem::create_directories(tmp / "tree/a");
  std::filesystem::create_directories(tmp / "tree/b/c");
  WriteFile(tmp / "plain/x.txt", text.substr(0, text.size() / 2));
  WriteFile(tmp / "plain/y.txt", text.substr(text.size() / 2));
  WriteFile(tmp / "tree/a/1.txt.zst", Zstd(text.substr(0, text.size() / 2)));
  WriteFile(tmp / "tree/b/c/2.zst", Zstd(text.substr(text.size() / 2)));
  WriteFile(tmp / "tree/a/notes.md", "ignored: not .txt or .zst\n");
  WriteFile(tmp / "tree/.hidden.txt", "ignored: hidden\n");
  auto first = RunPrepare(Options(tmp / "plain", tmp / "out_plain"));
  REQUIRE_MESSAGE(first.ok(), first.status().ToString());
  PrepareOptions o = Options(tmp / "tree", tmp / "out_zst");
  o.tokenizer_path = tmp / "out_plain/tokenizer.model";
  auto second = RunPrepare(o);
  REQUIRE_MESSAGE(second.ok(), second.status().ToString());
  CHECK(second->read.files == 2);
  CHECK_FALSE(second->trained_tokenizer);
  auto a = TokenDataset::Open(tmp / "out_plain", "train");
  auto b = TokenDataset::Open(tmp / "out_zst", "train");
  REQUIRE((a.ok() && b.ok()));
  CHECK(a->num_tokens() > 0);
  CHECK(AllTokens(*a) == AllTokens(*b));
  CHECK(a->fingerprint() == b->fingerprint());
}

TEST_CASE("invalid UTF-8 lines are skipped and counted with file and line") {
  TempDir tmp;
  std::string text = Corpus(Documents(30));
  text += "Dòng hỏng \xff\xfe ở đây\nDòng tốt\n\n\xc3\x28\n";
  WriteFile(tmp / "bad.txt", text);
  auto s = RunPrepare(Options(tmp / "bad.txt", tmp / "out"));
  REQUIRE_MESSAGE(s.ok(), s.status().ToString());
  CHECK(s->read.invalid_lines == 2);
  REQUIRE(s->read.invalid_examples.size() == 2);
  const int bad_line = static_cast<int>(std::count(text.begin(), text.end(), '\n')) - 3;
  CHECK(s->read.invalid_examples[0].find(tmp / "bad.txt" + ":" + std::to_string(bad_line)) == 0);
  CHECK(s->read.invalid_examples[0].find("invalid UTF-8 at byte 13") != std::string::npos);
  CHECK(s->read.documents == 31);  // the last document held only an invalid line
}

TEST_CASE("clear errors: no inputs, nothing found, missing path, truncated zst, all invalid") {
  TempDir tmp;
  std::filesystem::create_directories(tmp / "empty_dir");
  WriteFile(tmp / "empty_dir/readme.md", "not an input\n");
  auto err = [&](PrepareOptions o) {
    auto s = RunPrepare(o);
    REQUIRE_FALSE(s.ok());
    return std::string(s.status().message());
  };
  PrepareOptions none = Options(tmp / "x", tmp / "out");
  none.inputs.clear();
  CHECK(err(none).find("no input given") != std::string::npos);
  CHECK(err(Options(tmp / "empty_dir", tmp / "out")).find("no input files") != std::string::npos);
  CHECK(err(Options(tmp / "missing.txt", tmp / "out")).find("missing.txt does not exist") !=
        std::string::npos);
  const std::string z = Zstd(Corpus(Documents(30)));
  WriteFile(tmp / "cut.zst", z.substr(0, z.size() / 2));
  const std::string cut = err(Options(tmp / "cut.zst", tmp / "out"));
  CHECK_MESSAGE(cut.find("cut.zst") != std::string::npos, cut);
  WriteFile(tmp / "junk.txt", "\xff\xff\n\xfe\n");
  CHECK(err(Options(tmp / "junk.txt", tmp / "out")).find("no valid UTF-8 text") !=
        std::string::npos);
  WriteFile(tmp / "zero.txt", "");
  CHECK(err(Options(tmp / "zero.txt", tmp / "out")).find("no valid") != std::string::npos);
  CHECK_FALSE(std::filesystem::exists(tmp / "out/manifest.txt"));
}

TEST_CASE("a rerun replaces old shards and temporary files") {
  TempDir tmp;
  WriteFile(tmp / "c.txt", Corpus(Documents(30)));
  std::filesystem::create_directories(tmp / "out");
  WriteFile(tmp / "out/train-00042.bin", "stale");
  WriteFile(tmp / "out/val-00000.bin.tmp", "interrupted");
  WriteFile(tmp / "out/keep.txt", "not ours");
  auto s = RunPrepare(Options(tmp / "c.txt", tmp / "out"));
  REQUIRE(s.ok());
  CHECK_FALSE(std::filesystem::exists(tmp / "out/train-00042.bin"));
  CHECK_FALSE(std::filesystem::exists(tmp / "out/val-00000.bin.tmp"));
  CHECK(std::filesystem::exists(tmp / "out/keep.txt"));
  CHECK(TokenDataset::Open(tmp / "out", "train").ok());
  // A replaced tokenizer no longer matches the manifest.
  std::string model = ReadFile(tmp / "out/tokenizer.model");
  model[model.size() / 2] ^= 1;
  WriteFile(tmp / "out/tokenizer.model", model);
  auto ds = TokenDataset::Open(tmp / "out", "train");
  REQUIRE_FALSE(ds.ok());
  CHECK(std::string(ds.status().message()).find("tokenizer.model does not match") !=
        std::string::npos);
}

TEST_CASE("the CLI refuses an empty input set and a missing --out with a message") {
  TempDir tmp;
  std::filesystem::create_directories(tmp / "nothing");
  const std::string cmd = std::string(RINGTRAIN_BINARY) + " prepare --input " + tmp / "nothing" +
                          " --out " + tmp / "o" + " 2>&1";
  FILE* p = ::popen(cmd.c_str(), "r");
  REQUIRE(p != nullptr);
  std::string output;
  char buf[512];
  while (std::fgets(buf, sizeof(buf), p) != nullptr) output += buf;
  const int rc = ::pclose(p);
  CHECK(rc != 0);
  CHECK_MESSAGE(output.find("no input files") != std::string::npos, output);
  FILE* q = ::popen((std::string(RINGTRAIN_BINARY) + " prepare --input x 2>&1").c_str(), "r");
  REQUIRE(q != nullptr);
  output.clear();
  while (std::fgets(buf, sizeof(buf), q) != nullptr) output += buf;
  CHECK(::pclose(q) != 0);
  CHECK_MESSAGE(output.find("--out") != std::string::npos, output);
}

}  // namespace
}  // namespace rt::data
