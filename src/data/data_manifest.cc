// Implementation of the data-directory manifest (see data_manifest.h).
#include "data/data_manifest.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "core/crc32c.h"
#include "core/status_macros.h"
#include "data/durable_file.h"

namespace rt::data {
namespace {

bool ParseHex32(absl::string_view s, uint32_t* out) {
  if (s.empty() || s.size() > 8) return false;
  uint32_t v = 0;
  for (char c : s) {
    int d;
    if (c >= '0' && c <= '9')
      d = c - '0';
    else if (c >= 'a' && c <= 'f')
      d = c - 'a' + 10;
    else
      return false;
    v = v * 16 + static_cast<uint32_t>(d);
  }
  *out = v;
  return true;
}

}  // namespace

bool ShardEntry::operator==(const ShardEntry& o) const {
  return split == o.split && file == o.file && tokens == o.tokens &&
         source_bytes == o.source_bytes && documents == o.documents && crc == o.crc;
}

bool IsPlainFileName(absl::string_view name) {
  if (name.empty() || name[0] == '.') return false;
  for (char c : name) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '.' || c == '_' || c == '-';
    if (!ok) return false;
  }
  return true;
}

absl::Status CheckLicenseText(absl::string_view text) {
  if (text.empty()) return absl::InvalidArgumentError("the licence text is empty");
  if (text.size() > 1000) return absl::InvalidArgumentError("the licence text is over 1000 bytes");
  for (char c : text) {
    const unsigned char u = static_cast<unsigned char>(c);
    if (u < 0x20 || u == 0x7f) {
      return absl::InvalidArgumentError("the licence text has a control character (a newline?)");
    }
  }
  return absl::OkStatus();
}

std::string DataManifest::Serialize() const {
  std::string s = "# ringtrain data directory: see src/data/data_manifest.h\n";
  absl::StrAppend(&s, "format ringtrain-data ", kManifestVersion, "\n");
  absl::StrAppend(&s, "vocab_size ", vocab_size, "\n");
  absl::StrAppend(&s, "token_bytes ", token_bytes, "\n");
  absl::StrAppend(&s, "eot_id ", eot_id, "\n");
  if (!tokenizer_file.empty()) {
    absl::StrAppend(&s, "tokenizer ", tokenizer_file, " ", absl::StrFormat("%08x", tokenizer_crc),
                    "\n");
  }
  if (!license.empty()) absl::StrAppend(&s, "license ", license, "\n");
  for (const ShardEntry& e : shards) {
    absl::StrAppend(&s, "shard ", e.split, " ", e.file, " ", e.tokens, " ", e.source_bytes, " ",
                    e.documents, " ", absl::StrFormat("%08x", e.crc), "\n");
  }
  absl::StrAppend(&s, "end ", shards.size(), " ",
                  absl::StrFormat("%08x", Crc32c(s.data(), s.size())), "\n");
  return s;
}

absl::StatusOr<DataManifest> DataManifest::Parse(absl::string_view text, const std::string& path) {
  DataManifest m;
  int line_no = 0;
  auto bad = [&](const std::string& what) {
    return absl::DataLossError(absl::StrCat("manifest ", path, " line ", line_no, ": ", what));
  };
  // Fixed keys, in order; then shard lines; then end.
  const char* const kHeaderKeys[] = {"format", "vocab_size", "token_bytes", "eot_id"};
  size_t next_header = 0;
  bool ended = false;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t nl = text.find('\n', pos);
    if (nl == absl::string_view::npos) {
      line_no++;
      return bad("last line is not terminated (truncated file?)");
    }
    absl::string_view line = text.substr(pos, nl - pos);
    const size_t line_begin = pos;
    pos = nl + 1;
    line_no++;
    if (ended) return bad("text after the end line");
    if (line.empty() || line[0] == '#') continue;
    std::vector<absl::string_view> f = absl::StrSplit(line, ' ');
    const absl::string_view key = f[0];
    if (next_header < 4) {
      if (key != kHeaderKeys[next_header]) {
        return bad(absl::StrCat("expected '", kHeaderKeys[next_header], "', found '", key, "'"));
      }
      ++next_header;
      if (key == "format") {
        if (f.size() != 3 || f[1] != "ringtrain-data")
          return bad("expected 'format ringtrain-data N'");
        int version;
        if (!absl::SimpleAtoi(f[2], &version)) return bad("bad format version");
        if (version != kManifestVersion) {
          return bad(absl::StrFormat("unsupported format version %d (this build reads %d)", version,
                                     kManifestVersion));
        }
        continue;
      }
      int v;
      if (f.size() != 2 || !absl::SimpleAtoi(f[1], &v))
        return bad(absl::StrCat("bad ", key, " line"));
      if (key == "vocab_size") {
        if (v <= 0) return bad("vocab_size must be positive");
        m.vocab_size = v;
      } else if (key == "token_bytes") {
        if (v != 2 && v != 4) return bad("token_bytes must be 2 or 4");
        if (v == 2 && m.vocab_size > 65536) return bad("vocab_size does not fit 2-byte tokens");
        m.token_bytes = v;
      } else {
        if (v < -1 || v >= m.vocab_size) return bad("eot_id outside the vocabulary");
        m.eot_id = v;
      }
      continue;
    }
    if (key == "license") {
      if (!m.license.empty() || !m.shards.empty()) return bad("misplaced license line");
      absl::Status valid = CheckLicenseText(line.substr(std::min<size_t>(line.size(), 8)));
      if (line.size() <= 8 || !valid.ok()) return bad("expected 'license TEXT'");
      m.license = std::string(line.substr(8));
      continue;
    }
    if (key == "tokenizer") {
      if (!m.tokenizer_file.empty() || !m.shards.empty()) return bad("misplaced tokenizer line");
      if (f.size() != 3 || !IsPlainFileName(f[1]) || !ParseHex32(f[2], &m.tokenizer_crc)) {
        return bad("expected 'tokenizer FILE CRC32C_HEX'");
      }
      m.tokenizer_file = std::string(f[1]);
    } else if (key == "shard") {
      ShardEntry e;
      if (f.size() != 7)
        return bad("expected 'shard SPLIT FILE TOKENS SOURCE_BYTES DOCUMENTS CRC'");
      if (f[1] != "train" && f[1] != "val") return bad(absl::StrCat("unknown split '", f[1], "'"));
      if (!IsPlainFileName(f[2])) return bad(absl::StrCat("bad shard file name '", f[2], "'"));
      if (!absl::SimpleAtoi(f[3], &e.tokens) || !absl::SimpleAtoi(f[4], &e.source_bytes) ||
          !absl::SimpleAtoi(f[5], &e.documents) || !ParseHex32(f[6], &e.crc)) {
        return bad("bad number in shard line");
      }
      e.split = std::string(f[1]);
      e.file = std::string(f[2]);
      m.shards.push_back(std::move(e));
    } else if (key == "end") {
      uint64_t n;
      uint32_t crc;
      if (f.size() != 3 || !absl::SimpleAtoi(f[1], &n) || !ParseHex32(f[2], &crc)) {
        return bad("expected 'end N CRC32C_HEX'");
      }
      if (n != m.shards.size()) {
        return bad(
            absl::StrFormat("end line says %d shards, the manifest lists %d", n, m.shards.size()));
      }
      if (Crc32c(text.data(), line_begin) != crc) {
        return bad("checksum mismatch (the manifest was edited or corrupted)");
      }
      ended = true;
    } else {
      return bad(absl::StrCat("unknown record '", key, "'"));
    }
  }
  if (!ended) {
    line_no++;
    return bad("no end line (truncated or incomplete manifest)");
  }
  return m;
}

absl::Status WriteManifest(const std::string& dir, const DataManifest& manifest) {
  return WriteFileAtomically(dir + "/" + kManifestName, manifest.Serialize());
}

absl::StatusOr<DataManifest> ReadManifest(const std::string& dir, std::string* text) {
  const std::string path = dir + "/" + kManifestName;
  auto contents = ReadWholeFile(path);
  if (!contents.ok()) {
    if (absl::IsNotFound(contents.status())) {
      return absl::NotFoundError(absl::StrCat(
          path,
          " not found: not a prepared data directory (or `ringtrain prepare` did not finish)"));
    }
    return contents.status();
  }
  ASSIGN_OR_RETURN(DataManifest m, DataManifest::Parse(*contents, path));
  if (text != nullptr) *text = std::move(*contents);
  return m;
}

}  // namespace rt::data
