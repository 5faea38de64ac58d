// Checkpoint reading and validation: Checkpoint::Open, ReadSection and the search for
// the newest valid checkpoint (format in checkpoint.h).
#include "ckpt/checkpoint.h"

#include <algorithm>
#include <filesystem>
#include <system_error>
#include <tuple>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"
#include "ckpt/file_io.h"
#include "core/status_macros.h"

namespace rt::ckpt {
namespace {

namespace fs = std::filesystem;

std::string StripTrailingSlashes(std::string p) {
  while (p.size() > 1 && p.back() == '/') p.pop_back();
  return p;
}

std::string BaseName(const std::string& p) {
  const size_t slash = p.rfind('/');
  return slash == std::string::npos ? p : p.substr(slash + 1);
}

// Rewrites an error about `file_path` (a file inside `dir`) as "<dir>: <file> ..." so
// that messages read "…/step-00000020: params.bin truncated: 1000 of 4096 bytes".
absl::Status InDir(const absl::Status& s, const std::string& dir, const std::string& file_name) {
  std::string msg(s.message());
  const std::string full = dir + "/" + file_name;
  for (size_t pos = msg.find(full); pos != std::string::npos; pos = msg.find(full, pos)) {
    msg.replace(pos, full.size(), file_name);
    pos += file_name.size();
  }
  return absl::Status(s.code(), absl::StrCat(dir, ": ", msg));
}

// "step-00000020: detail" from an error "<dir>: detail" about checkpoint `dir`.
std::string Problem(const std::string& dir, const absl::Status& s) {
  absl::string_view msg = s.message();
  absl::ConsumePrefix(&msg, dir + ": ");
  return absl::StrCat(BaseName(dir), ": ", msg);
}

// Opens and fully verifies one checkpoint directory.
absl::StatusOr<Checkpoint> OpenAndVerify(const std::string& dir) {
  ASSIGN_OR_RETURN(Checkpoint c, Checkpoint::Open(dir));
  RETURN_IF_ERROR(c.VerifyAllSections());
  return c;
}

}  // namespace

absl::StatusOr<Checkpoint> Checkpoint::Open(const std::string& step_dir_in) {
  const std::string dir = StripTrailingSlashes(step_dir_in);
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) {
    return absl::NotFoundError(absl::StrCat(dir, ": no such checkpoint directory"));
  }
  const std::string manifest_path = dir + "/" + kManifestFileName;
  auto text = ReadSmallFile(manifest_path, kMaxManifestBytes);
  if (!text.ok()) {
    if (absl::IsNotFound(text.status())) {
      return absl::NotFoundError(absl::StrCat(dir, ": missing ", kManifestFileName));
    }
    return InDir(text.status(), dir, kManifestFileName);
  }
  Checkpoint c;
  c.path_ = dir;
  if (absl::Status s = DecodeManifest(*text, kManifestFileName, &c.meta_, &c.sections_); !s.ok()) {
    return absl::DataLossError(absl::StrCat(dir, ": ", s.message()));
  }
  int64_t name_step = 0;
  if (ParseStepDirName(BaseName(dir), &name_step) && name_step != c.meta_.step) {
    return absl::DataLossError(
        absl::StrFormat("%s: directory name says step %d but the manifest says step %d", dir,
                        name_step, c.meta_.step));
  }
  for (const SectionInfo& s : c.sections_) {
    const std::string file = s.name + ".bin";
    auto size = RegularFileSize(dir + "/" + file);
    if (!size.ok()) {
      if (absl::IsNotFound(size.status())) {
        return absl::DataLossError(absl::StrCat(dir, ": ", file, " missing"));
      }
      return absl::DataLossError(InDir(size.status(), dir, file).message());
    }
    if (*size < s.bytes) {
      return absl::DataLossError(
          absl::StrFormat("%s: %s truncated: %d of %d bytes", dir, file, *size, s.bytes));
    }
    if (*size > s.bytes) {
      return absl::DataLossError(
          absl::StrFormat("%s: %s has %d bytes, expected %d", dir, file, *size, s.bytes));
    }
  }
  return c;
}

const SectionInfo* Checkpoint::Find(absl::string_view name) const {
  for (const SectionInfo& s : sections_) {
    if (s.name == name) return &s;
  }
  return nullptr;
}

bool Checkpoint::HasSection(absl::string_view name) const { return Find(name) != nullptr; }

size_t Checkpoint::SectionBytes(absl::string_view name) const {
  const SectionInfo* s = Find(name);
  return s ? static_cast<size_t>(s->bytes) : 0;
}

absl::Status Checkpoint::ReadSection(absl::string_view name, absl::Span<uint8_t> out) const {
  const SectionInfo* s = Find(name);
  if (!s) return absl::NotFoundError(absl::StrCat(path_, ": no section '", name, "'"));
  if (out.size() != s->bytes) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: section '%s' has %d bytes, the destination %d", path_, name, s->bytes, out.size()));
  }
  const std::string file = s->name + ".bin";
  auto crc = ReadFileExactly(path_ + "/" + file, out);
  if (!crc.ok()) return absl::DataLossError(InDir(crc.status(), path_, file).message());
  if (*crc != s->crc32c) {
    return absl::DataLossError(absl::StrFormat(
        "%s: %s checksum mismatch (manifest %08x, data %08x)", path_, file, s->crc32c, *crc));
  }
  return absl::OkStatus();
}

absl::Status Checkpoint::ReadSectionRange(absl::string_view name, uint64_t offset,
                                          absl::Span<uint8_t> out) const {
  const SectionInfo* s = Find(name);
  if (!s) return absl::NotFoundError(absl::StrCat(path_, ": no section '", name, "'"));
  const std::string file = s->name + ".bin";
  absl::Status st = ReadFileRange(path_ + "/" + file, s->bytes, offset, out);
  if (!st.ok()) return absl::DataLossError(InDir(st, path_, file).message());
  return absl::OkStatus();
}

absl::StatusOr<std::vector<uint8_t>> Checkpoint::ReadSectionBytes(absl::string_view name) const {
  const SectionInfo* s = Find(name);
  if (!s) return absl::NotFoundError(absl::StrCat(path_, ": no section '", name, "'"));
  std::vector<uint8_t> out(static_cast<size_t>(s->bytes));
  RETURN_IF_ERROR(ReadSection(name, absl::MakeSpan(out)));
  return out;
}

absl::Status Checkpoint::VerifyAllSections() const {
  for (const SectionInfo& s : sections_) {
    const std::string file = s.name + ".bin";
    auto crc = CrcOfFile(path_ + "/" + file, s.bytes);
    if (!crc.ok()) return absl::DataLossError(InDir(crc.status(), path_, file).message());
    if (*crc != s.crc32c) {
      return absl::DataLossError(absl::StrFormat(
          "%s: %s checksum mismatch (manifest %08x, data %08x)", path_, file, s.crc32c, *crc));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<Checkpoint> OpenLatestValidCheckpoint(const std::string& ckpt_dir_in,
                                                     std::vector<std::string>* problems) {
  const std::string ckpt_dir = StripTrailingSlashes(ckpt_dir_in);
  std::vector<std::string> local_problems;
  if (!problems) problems = &local_problems;
  std::error_code ec;
  if (!fs::is_directory(ckpt_dir, ec)) {
    return absl::NotFoundError(absl::StrCat("checkpoint directory ", ckpt_dir, " does not exist"));
  }

  // A checkpoint directory given directly: validate it, no fallback.
  int64_t ignored_step = 0;
  if (fs::exists(ckpt_dir + "/" + kManifestFileName, ec) ||
      ParseStepDirName(BaseName(ckpt_dir), &ignored_step)) {
    auto c = OpenAndVerify(ckpt_dir);
    if (!c.ok()) problems->push_back(Problem(ckpt_dir, c.status()));
    return c;
  }

  // Open (manifest + sizes) every step directory, then verify newest first.
  std::vector<Checkpoint> candidates;
  size_t invalid = 0;
  std::vector<std::string> names;
  for (fs::directory_iterator it(ckpt_dir, ec), end; !ec && it != end; it.increment(ec)) {
    names.push_back(it->path().filename().string());
  }
  if (ec) {
    return absl::Status(absl::ErrnoToStatusCode(ec.value()),
                        absl::StrCat("listing ", ckpt_dir, ": ", ec.message()));
  }
  std::sort(names.begin(), names.end());
  for (const std::string& name : names) {
    int64_t step = 0;
    if (!ParseStepDirName(name, &step)) continue;  // temp dirs, other files
    const std::string dir = ckpt_dir + "/" + name;
    auto c = Checkpoint::Open(dir);
    if (!c.ok()) {
      problems->push_back(Problem(dir, c.status()));
      ++invalid;
      continue;
    }
    candidates.push_back(*std::move(c));
  }
  std::sort(candidates.begin(), candidates.end(), [](const Checkpoint& a, const Checkpoint& b) {
    return std::make_tuple(a.meta().epoch, a.meta().step, a.path()) >
           std::make_tuple(b.meta().epoch, b.meta().step, b.path());
  });
  for (const Checkpoint& c : candidates) {
    if (absl::Status s = c.VerifyAllSections(); !s.ok()) {
      problems->push_back(Problem(c.path(), s));
      ++invalid;
      continue;
    }
    return c;
  }
  if (invalid == 0) return absl::NotFoundError(absl::StrCat("no checkpoint in ", ckpt_dir));
  return absl::NotFoundError(absl::StrFormat("no valid checkpoint in %s (%d invalid, e.g. %s)",
                                             ckpt_dir, invalid, problems->back()));
}

}  // namespace rt::ckpt
