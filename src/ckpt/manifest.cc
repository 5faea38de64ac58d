// Checkpoint manifest codec: encoding and strict decoding of manifest.txt.
#include "ckpt/manifest.h"

#include <limits>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "core/crc32c.h"

namespace rt::ckpt {
namespace {

constexpr char kCrcKey[] = "manifest-crc32c";

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// Strict unsigned decimal: 1..20 digits, no sign, no spaces, no overflow.
bool ParseUint64(absl::string_view s, uint64_t* out) {
  if (s.empty() || s.size() > 20) return false;
  uint64_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
    const uint64_t d = static_cast<uint64_t>(c - '0');
    if (v > (std::numeric_limits<uint64_t>::max() - d) / 10) return false;
    v = v * 10 + d;
  }
  *out = v;
  return true;
}

// Exactly 8 lowercase hex digits.
bool ParseCrcHex(absl::string_view s, uint32_t* out) {
  if (s.size() != 8) return false;
  uint32_t v = 0;
  for (char c : s) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
    v = (v << 4) | static_cast<uint32_t>(HexValue(c));
  }
  *out = v;
  return true;
}

}  // namespace

bool IsValidSectionName(absl::string_view name) {
  if (name.empty() || name.size() > 128 || name[0] == '.' || name == "manifest") return false;
  for (char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '_' || c == '-' || c == '.';
    if (!ok) return false;
  }
  return true;
}

std::string StepDirName(int64_t step) { return absl::StrFormat("step-%08d", step); }

bool ParseStepDirName(absl::string_view name, int64_t* step) {
  if (!absl::ConsumePrefix(&name, "step-") || name.size() < 8) return false;
  uint64_t v = 0;
  if (!ParseUint64(name, &v) || v > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
    return false;
  }
  *step = static_cast<int64_t>(v);
  return true;
}

std::string EscapeManifestToken(absl::string_view raw) {
  static const char kHex[] = "0123456789ABCDEF";
  std::string out;
  out.reserve(raw.size());
  for (char ch : raw) {
    const auto c = static_cast<unsigned char>(ch);
    if (c >= 0x21 && c <= 0x7E && c != '%') {
      out.push_back(ch);
    } else {
      out.push_back('%');
      out.push_back(kHex[c >> 4]);
      out.push_back(kHex[c & 15]);
    }
  }
  return out;
}

absl::StatusOr<std::string> UnescapeManifestToken(absl::string_view token) {
  std::string out;
  out.reserve(token.size());
  for (size_t i = 0; i < token.size(); ++i) {
    const auto c = static_cast<unsigned char>(token[i]);
    if (c < 0x21 || c > 0x7E) {
      return absl::InvalidArgumentError(absl::StrFormat("byte 0x%02x at offset %d", c, i));
    }
    if (c != '%') {
      out.push_back(token[i]);
      continue;
    }
    const int hi = i + 1 < token.size() ? HexValue(token[i + 1]) : -1;
    const int lo = i + 2 < token.size() ? HexValue(token[i + 2]) : -1;
    if (hi < 0 || lo < 0) {
      return absl::InvalidArgumentError(absl::StrFormat("bad %%XX escape at offset %d", i));
    }
    out.push_back(static_cast<char>(hi * 16 + lo));
    i += 2;
  }
  return out;
}

std::string EncodeManifest(const CheckpointMeta& meta, const std::vector<SectionInfo>& sections) {
  std::string text = absl::StrFormat("%s %d\nstep %d\nepoch %d\n", kManifestMagic,
                                     kCheckpointFormatVersion, meta.step, meta.epoch);
  for (const auto& [key, value] : meta.fields) {
    absl::StrAppend(&text, "field ", EscapeManifestToken(key), " ", EscapeManifestToken(value),
                    "\n");
  }
  for (const SectionInfo& s : sections) {
    absl::StrAppend(&text, absl::StrFormat("section %s %d %08x\n", s.name, s.bytes, s.crc32c));
  }
  absl::StrAppend(&text,
                  absl::StrFormat("%s %08x\n", kCrcKey, rt::Crc32c(text.data(), text.size())));
  return text;
}

absl::Status DecodeManifest(absl::string_view text, absl::string_view where, CheckpointMeta* meta,
                            std::vector<SectionInfo>* sections) {
  auto bad = [&](size_t line_no, absl::string_view what) {
    return absl::DataLossError(absl::StrCat(where, ":", line_no, ": ", what));
  };
  if (text.empty()) return absl::DataLossError(absl::StrCat(where, ": empty manifest"));
  if (text.back() != '\n') {
    return absl::DataLossError(absl::StrCat(where, ": truncated (no final newline)"));
  }
  std::vector<absl::string_view> lines = absl::StrSplit(text.substr(0, text.size() - 1), '\n');

  CheckpointMeta m;
  std::vector<SectionInfo> secs;
  std::set<std::string> section_names;
  // Stages enforce the line order: magic, step, epoch, fields, sections, crc.
  enum Stage { kMagic, kStep, kEpoch, kFields, kSections, kDone } stage = kMagic;
  size_t offset = 0;  // byte offset of the current line in `text`
  for (size_t i = 0; i < lines.size(); ++i) {
    const size_t line_no = i + 1;
    const absl::string_view line = lines[i];
    std::vector<absl::string_view> tok = absl::StrSplit(line, ' ');
    if (stage == kDone) return bad(line_no, "text after the manifest-crc32c line");
    if (stage == kMagic) {
      if (tok.size() != 2 || tok[0] != kManifestMagic) {
        return bad(line_no, "not a ringtrain checkpoint manifest (bad first line)");
      }
      uint64_t version = 0;
      if (!ParseUint64(tok[1], &version)) return bad(line_no, "bad format version");
      if (version != static_cast<uint64_t>(kCheckpointFormatVersion)) {
        return bad(line_no, absl::StrFormat("unsupported format version %d (this binary reads %d)",
                                            version, kCheckpointFormatVersion));
      }
      stage = kStep;
    } else if (stage == kStep) {
      uint64_t v = 0;
      if (tok.size() != 2 || tok[0] != "step" || !ParseUint64(tok[1], &v) ||
          v > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        return bad(line_no, "expected 'step <decimal>'");
      }
      m.step = static_cast<int64_t>(v);
      stage = kEpoch;
    } else if (stage == kEpoch) {
      if (tok.size() != 2 || tok[0] != "epoch" || !ParseUint64(tok[1], &m.epoch)) {
        return bad(line_no, "expected 'epoch <decimal>'");
      }
      stage = kFields;
    } else if (tok[0] == "field" && stage == kFields) {
      if (tok.size() != 3) return bad(line_no, "expected 'field <key> <value>'");
      auto key = UnescapeManifestToken(tok[1]);
      if (!key.ok()) return bad(line_no, absl::StrCat("field key: ", key.status().message()));
      auto value = UnescapeManifestToken(tok[2]);
      if (!value.ok()) {
        return bad(line_no, absl::StrCat("field value: ", value.status().message()));
      }
      if (key->empty()) return bad(line_no, "empty field key");
      if (!m.fields.empty() && !(m.fields.rbegin()->first < *key)) {
        return bad(line_no, "field keys not unique and sorted");
      }
      m.fields.emplace_hint(m.fields.end(), *std::move(key), *std::move(value));
    } else if (tok[0] == "section" && (stage == kFields || stage == kSections)) {
      stage = kSections;
      SectionInfo s;
      if (tok.size() != 4 || !ParseUint64(tok[2], &s.bytes) || !ParseCrcHex(tok[3], &s.crc32c)) {
        return bad(line_no, "expected 'section <name> <bytes> <crc32c as 8 hex digits>'");
      }
      if (!IsValidSectionName(tok[1])) {
        return bad(line_no,
                   absl::StrCat("invalid section name '", EscapeManifestToken(tok[1]), "'"));
      }
      s.name = std::string(tok[1]);
      if (!section_names.insert(s.name).second) {
        return bad(line_no, absl::StrCat("duplicate section '", s.name, "'"));
      }
      secs.push_back(std::move(s));
    } else if (tok[0] == kCrcKey) {
      uint32_t stored = 0;
      if (tok.size() != 2 || !ParseCrcHex(tok[1], &stored)) {
        return bad(line_no, "expected 'manifest-crc32c <8 hex digits>'");
      }
      const uint32_t actual = rt::Crc32c(text.data(), offset);
      if (stored != actual) {
        return bad(line_no,
                   absl::StrFormat("manifest checksum mismatch (stored %08x, computed %08x)",
                                   stored, actual));
      }
      stage = kDone;
    } else {
      return bad(line_no,
                 absl::StrCat("unexpected line '", EscapeManifestToken(line.substr(0, 60)), "'"));
    }
    offset += line.size() + 1;
  }
  if (stage != kDone) {
    return absl::DataLossError(absl::StrCat(where, ": truncated (no manifest-crc32c line)"));
  }
  *meta = std::move(m);
  *sections = std::move(secs);
  return absl::OkStatus();
}

}  // namespace rt::ckpt
