// Encoding and strict decoding of the data-fetch messages (see fetch_messages.h).
#include "fetch/fetch_messages.h"

#include "absl/strings/escaping.h"
#include "absl/strings/str_format.h"
#include "core/byte_codec.h"
#include "data/data_manifest.h"

namespace rt::fetch {
namespace {

bool KnownKind(uint8_t k) { return k >= 1 && k <= 9; }
bool HasFile(FetchKind k) {
  return k == FetchKind::kFileRequest || k == FetchKind::kFileStart || k == FetchKind::kChunk ||
         k == FetchKind::kRefused;
}

void Head(ByteWriter& w, FetchKind kind) {
  w.Int<uint32_t>(kFetchMagic);
  w.Int<uint8_t>(kFetchProtocolVersion);
  w.Int<uint8_t>(static_cast<uint8_t>(kind));
}

}  // namespace

const char* FetchKindName(FetchKind kind) {
  switch (kind) {
    case FetchKind::kManifestRequest:
      return "manifest request";
    case FetchKind::kManifest:
      return "manifest";
    case FetchKind::kNoData:
      return "no data";
    case FetchKind::kFileRequest:
      return "file request";
    case FetchKind::kFileStart:
      return "file start";
    case FetchKind::kChunk:
      return "chunk";
    case FetchKind::kRefused:
      return "refused";
    case FetchKind::kStatusRequest:
      return "status request";
    case FetchKind::kStatus:
      return "status";
  }
  return "unknown";
}

std::vector<uint8_t> EncodeFetchMessage(const FetchMessage& m) {
  std::vector<uint8_t> out;
  if (m.kind == FetchKind::kChunk) {
    EncodeChunk(m.file, m.offset, m.bytes, &out);
    return out;
  }
  ByteWriter w(&out);
  Head(w, m.kind);
  if (HasFile(m.kind)) w.String(m.file);
  switch (m.kind) {
    case FetchKind::kManifest:
    case FetchKind::kNoData:
    case FetchKind::kRefused:
      w.String(m.text);
      break;
    case FetchKind::kFileRequest:
      w.Int<uint64_t>(m.offset);
      break;
    case FetchKind::kFileStart:
      w.Int<uint64_t>(m.size);
      break;
    case FetchKind::kStatus:
      w.Bool(m.complete);
      w.Int<uint64_t>(m.have_bytes);
      w.Int<uint64_t>(m.total_bytes);
      break;
    default:
      break;
  }
  return out;
}

void EncodeChunk(const std::string& file, uint64_t offset, absl::Span<const uint8_t> bytes,
                 std::vector<uint8_t>* out) {
  out->reserve(out->size() + 24 + file.size() + bytes.size());
  ByteWriter w(out);
  Head(w, FetchKind::kChunk);
  w.String(file);
  w.Int<uint64_t>(offset);
  w.Int<uint32_t>(static_cast<uint32_t>(bytes.size()));
  out->insert(out->end(), bytes.begin(), bytes.end());
}

absl::StatusOr<FetchMessage> DecodeFetchMessage(absl::Span<const uint8_t> bytes,
                                                const std::string& peer) {
  ByteReader r(bytes);
  auto bad = [&](const std::string& what) {
    return absl::DataLossError(absl::StrFormat("data-fetch message from %s: %s", peer, what));
  };
  if (r.Int<uint32_t>("magic") != kFetchMagic || !r.ok()) return bad("not a data-fetch message");
  const uint8_t version = r.Int<uint8_t>("version");
  if (!r.ok()) return bad(r.error());
  if (version != kFetchProtocolVersion) {
    return bad(absl::StrFormat("protocol version %d, this build speaks %d", version,
                               kFetchProtocolVersion));
  }
  const uint8_t kind = r.Int<uint8_t>("kind");
  if (!r.ok()) return bad(r.error());
  if (!KnownKind(kind)) return bad(absl::StrFormat("unknown kind %d", kind));
  FetchMessage m;
  m.kind = static_cast<FetchKind>(kind);
  if (HasFile(m.kind)) {
    m.file = r.String("file name", kMaxFileNameBytes);
    if (r.ok() && !data::IsPlainFileName(m.file)) {
      return bad(absl::StrFormat("file name '%s' is not a plain name in a data directory",
                                 absl::CHexEscape(m.file)));
    }
  }
  switch (m.kind) {
    case FetchKind::kManifest:
      m.text = r.String("manifest", kMaxManifestBytes);
      break;
    case FetchKind::kNoData:
    case FetchKind::kRefused:
      m.text = r.String("reason", kMaxReasonBytes);
      break;
    case FetchKind::kFileRequest:
      m.offset = r.Int<uint64_t>("offset");
      break;
    case FetchKind::kFileStart:
      m.size = r.Int<uint64_t>("size");
      break;
    case FetchKind::kChunk: {
      m.offset = r.Int<uint64_t>("offset");
      m.bytes = r.Bytes("chunk", kMaxChunkBytes);
      if (r.ok() && m.bytes.empty()) return bad("empty chunk");
      if (r.ok() && m.offset > UINT64_MAX - m.bytes.size()) return bad("chunk offset overflows");
      break;
    }
    case FetchKind::kStatus:
      m.complete = r.Bool("complete");
      m.have_bytes = r.Int<uint64_t>("have");
      m.total_bytes = r.Int<uint64_t>("total");
      break;
    default:
      break;
  }
  if (!r.ok()) return bad(r.error());
  if (!r.AtEnd())
    return bad(absl::StrFormat("%s message has trailing bytes", FetchKindName(m.kind)));
  return m;
}

}  // namespace rt::fetch
