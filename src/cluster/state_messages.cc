// Encoding and strict decoding of the state-transfer messages (see state_messages.h).
#include "cluster/state_messages.h"

#include <set>

#include "absl/strings/str_format.h"
#include "core/byte_codec.h"

namespace rt::cluster {
namespace {

enum MsgType : uint8_t { kRequest = 1, kManifest = 2, kChunk = 3, kAck = 4 };

class Writer {
 public:
  explicit Writer(MsgType type) : w_(&bytes_) {
    w_.Int<uint32_t>(kStateMessageMagic);
    w_.Int<uint8_t>(type);
  }
  ByteWriter& w() { return w_; }
  std::vector<uint8_t> Take() { return std::move(bytes_); }

 private:
  std::vector<uint8_t> bytes_;
  ByteWriter w_;
};

std::string Cut(const std::string& reason) { return reason.substr(0, kMaxStateReason); }

absl::Status Malformed(const std::string& where, const std::string& what) {
  return absl::DataLossError(absl::StrFormat("%s: malformed message: %s", where, what));
}

// Reads and checks magic and type; the caller reads the fields, then calls Finish.
class Reader {
 public:
  Reader(absl::Span<const uint8_t> bytes, const std::string& where) : r_(bytes), where_(where) {}
  absl::Status Header(MsgType want) {
    const uint32_t magic = r_.Int<uint32_t>("magic");
    const uint8_t type = r_.Int<uint8_t>("type");
    if (!r_.ok() || magic != kStateMessageMagic) {
      return Malformed(where_, "not a state-transfer message");
    }
    if (type != want) {
      return Malformed(where_,
                       absl::StrFormat("message type %d where %d was expected", type, want));
    }
    return absl::OkStatus();
  }
  ByteReader& r() { return r_; }
  absl::Status Finish() {
    if (!r_.ok()) return Malformed(where_, r_.error());
    if (!r_.AtEnd()) return Malformed(where_, "trailing bytes");
    return absl::OkStatus();
  }
  absl::Status Bad(const std::string& what) const { return Malformed(where_, what); }

 private:
  ByteReader r_;
  const std::string& where_;
};

}  // namespace

std::vector<uint8_t> EncodeStateRequest(const StateRequest& m) {
  Writer w(kRequest);
  w.w().Int<uint64_t>(m.want.epoch);
  w.w().Int<int64_t>(m.want.step);
  return w.Take();
}

std::vector<uint8_t> EncodeStateManifest(const StateManifest& m) {
  Writer w(kManifest);
  w.w().Bool(m.ok);
  w.w().String(Cut(m.reason));
  if (!m.ok) return w.Take();
  w.w().Int<uint64_t>(m.version.epoch);
  w.w().Int<int64_t>(m.version.step);
  w.w().Int<uint32_t>(m.chunk_bytes);
  w.w().Int<uint32_t>(static_cast<uint32_t>(m.sections.size()));
  for (const StateManifestEntry& s : m.sections) {
    w.w().String(s.name);
    w.w().Int<uint64_t>(s.bytes);
    w.w().Int<uint32_t>(s.crc32c);
  }
  return w.Take();
}

std::vector<uint8_t> EncodeStateChunkHeader(const StateChunkHeader& m) {
  Writer w(kChunk);
  w.w().Int<uint32_t>(m.section);
  w.w().Int<uint64_t>(m.offset);
  w.w().Int<uint32_t>(m.bytes);
  w.w().Int<uint32_t>(m.crc32c);
  return w.Take();
}

std::vector<uint8_t> EncodeStateAck(const StateAck& m) {
  Writer w(kAck);
  w.w().Bool(m.ok);
  w.w().String(Cut(m.reason));
  return w.Take();
}

absl::StatusOr<StateRequest> DecodeStateRequest(absl::Span<const uint8_t> bytes,
                                                const std::string& where) {
  Reader r(bytes, where);
  if (absl::Status s = r.Header(kRequest); !s.ok()) return s;
  StateRequest m;
  m.want.epoch = r.r().Int<uint64_t>("request epoch");
  m.want.step = r.r().Int<int64_t>("request step");
  if (absl::Status s = r.Finish(); !s.ok()) return s;
  return m;
}

absl::StatusOr<StateManifest> DecodeStateManifest(absl::Span<const uint8_t> bytes,
                                                  uint64_t max_total_bytes,
                                                  const std::string& where) {
  Reader r(bytes, where);
  if (absl::Status s = r.Header(kManifest); !s.ok()) return s;
  StateManifest m;
  m.ok = r.r().Bool("manifest ok");
  m.reason = r.r().String("manifest reason", kMaxStateReason);
  if (!m.ok || !r.r().ok()) {
    if (absl::Status s = r.Finish(); !s.ok()) return s;
    return m;
  }
  m.version.epoch = r.r().Int<uint64_t>("manifest epoch");
  m.version.step = r.r().Int<int64_t>("manifest step");
  m.chunk_bytes = r.r().Int<uint32_t>("manifest chunk size");
  const uint32_t count = r.r().Int<uint32_t>("manifest section count");
  if (!r.r().ok()) return r.Bad(r.r().error());
  if (m.chunk_bytes == 0) return r.Bad("chunk size 0");
  if (count > kMaxStateSections) return r.Bad(absl::StrFormat("%d sections", count));
  std::set<std::string> names;
  uint64_t total = 0;
  for (uint32_t i = 0; i < count; ++i) {
    StateManifestEntry e;
    e.name = r.r().String("section name", kMaxStateSectionName);
    e.bytes = r.r().Int<uint64_t>("section size");
    e.crc32c = r.r().Int<uint32_t>("section crc32c");
    if (!r.r().ok()) return r.Bad(r.r().error());
    if (e.name.empty() || !names.insert(e.name).second) {
      return r.Bad("empty or repeated section name '" + e.name + "'");
    }
    if (e.bytes > max_total_bytes || total + e.bytes > max_total_bytes) {
      return absl::ResourceExhaustedError(absl::StrFormat(
          "%s: the manifest announces more than the limit of %d bytes", where, max_total_bytes));
    }
    total += e.bytes;
    m.sections.push_back(std::move(e));
  }
  if (absl::Status s = r.Finish(); !s.ok()) return s;
  return m;
}

absl::StatusOr<StateChunkHeader> DecodeStateChunkHeader(absl::Span<const uint8_t> bytes,
                                                        const std::string& where) {
  Reader r(bytes, where);
  if (absl::Status s = r.Header(kChunk); !s.ok()) return s;
  StateChunkHeader m;
  m.section = r.r().Int<uint32_t>("chunk section");
  m.offset = r.r().Int<uint64_t>("chunk offset");
  m.bytes = r.r().Int<uint32_t>("chunk size");
  m.crc32c = r.r().Int<uint32_t>("chunk crc32c");
  if (absl::Status s = r.Finish(); !s.ok()) return s;
  return m;
}

absl::StatusOr<StateAck> DecodeStateAck(absl::Span<const uint8_t> bytes, const std::string& where) {
  Reader r(bytes, where);
  if (absl::Status s = r.Header(kAck); !s.ok()) return s;
  StateAck m;
  m.ok = r.r().Bool("acknowledgement ok");
  m.reason = r.r().String("acknowledgement reason", kMaxStateReason);
  if (absl::Status s = r.Finish(); !s.ok()) return s;
  return m;
}

}  // namespace rt::cluster
