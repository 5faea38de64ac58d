// Membership control messages: binary encoding and strict decoding (see messages.h).
#include "cluster/messages.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/byte_codec.h"
#include "core/crc32c.h"

namespace rt::cluster {
namespace {

void WriteState(ByteWriter& w, const StateVersion& s) {
  w.Int<uint64_t>(s.epoch);
  w.Int<int64_t>(s.step);
}
void WriteView(ByteWriter& w, const View& v) {
  w.Int<uint64_t>(v.epoch);
  w.Strings(v.members);
}
std::string ReadString(ByteReader& r, const char* what) { return r.String(what, kMaxStringBytes); }
std::vector<std::string> ReadStrings(ByteReader& r, const char* what) {
  return r.Strings(what, kMaxListItems, kMaxStringBytes);
}
StateVersion ReadState(ByteReader& r, const char* what) {
  StateVersion s;
  s.epoch = r.Int<uint64_t>(what);
  s.step = r.Int<int64_t>(what);
  if (s.step < -1) r.Fail(absl::StrCat(what, ": bad step ", s.step));
  return s;
}
View ReadView(ByteReader& r, const char* what) {
  View v;
  v.epoch = r.Int<uint64_t>(what);
  v.members = ReadStrings(r, what);
  return v;
}

void WriteBody(ByteWriter& w, const Heartbeat& m) {
  WriteView(w, m.view);
  WriteState(w, m.state);
  w.Int<uint32_t>(m.hosts_fingerprint);
  w.Bool(m.training);
  w.Bool(m.disrupted);
  w.Strings(m.suspects);
  w.Bytes(m.report);
}
void WriteBody(ByteWriter& w, const JoinRequest& m) {
  WriteState(w, m.state);
  w.Int<uint32_t>(m.hosts_fingerprint);
}
void WriteBody(ByteWriter& w, const ViewProposal& m) { WriteView(w, m.view); }
void WriteBody(ByteWriter& w, const ViewAck& m) {
  w.Int<uint64_t>(m.epoch);
  WriteState(w, m.state);
}
void WriteBody(ByteWriter& w, const ViewNack& m) {
  w.Int<uint64_t>(m.epoch);
  w.Int<uint64_t>(m.promised_epoch);
  w.String(m.promised_to);
}
void WriteBody(ByteWriter& w, const ViewCommit& m) {
  WriteView(w, m.view);
  WriteState(w, m.agreement.resume);
  w.String(m.agreement.source);
  w.Int<int64_t>(m.agreement.min_step);
  w.Strings(m.agreement.need_state);
}
void WriteBody(ByteWriter& w, const Leave& m) {
  w.String(m.reason);
  w.Int<int64_t>(m.last_step);
}

Message ReadBody(ByteReader& r, uint8_t type) {
  switch (type) {
    case 0: {
      Heartbeat m;
      m.view = ReadView(r, "heartbeat view");
      m.state = ReadState(r, "heartbeat state");
      m.hosts_fingerprint = r.Int<uint32_t>("heartbeat hosts fingerprint");
      m.training = r.Bool("heartbeat training");
      m.disrupted = r.Bool("heartbeat disrupted");
      m.suspects = ReadStrings(r, "heartbeat suspects");
      m.report = r.Bytes("heartbeat report", kMaxReportBytes);
      return m;
    }
    case 1: {
      JoinRequest m;
      m.state = ReadState(r, "join state");
      m.hosts_fingerprint = r.Int<uint32_t>("join hosts fingerprint");
      return m;
    }
    case 2: {
      ViewProposal m;
      m.view = ReadView(r, "proposal view");
      return m;
    }
    case 3: {
      ViewAck m;
      m.epoch = r.Int<uint64_t>("ack epoch");
      m.state = ReadState(r, "ack state");
      return m;
    }
    case 4: {
      ViewNack m;
      m.epoch = r.Int<uint64_t>("nack epoch");
      m.promised_epoch = r.Int<uint64_t>("nack promised epoch");
      m.promised_to = ReadString(r, "nack promised to");
      return m;
    }
    case 5: {
      ViewCommit m;
      m.view = ReadView(r, "commit view");
      m.agreement.resume = ReadState(r, "commit resume");
      m.agreement.source = ReadString(r, "commit source");
      m.agreement.min_step = r.Int<int64_t>("commit min step");
      m.agreement.need_state = ReadStrings(r, "commit need_state");
      return m;
    }
    default: {
      Leave m;
      m.reason = ReadString(r, "leave reason");
      m.last_step = r.Int<int64_t>("leave last step");
      if (m.last_step < -1) r.Fail("leave last step below -1");
      return m;
    }
  }
}

constexpr uint8_t kNumTypes = std::variant_size_v<Message>;

}  // namespace

const char* MessageName(const Message& m) {
  static const char* const kNames[] = {"Heartbeat", "JoinRequest", "ViewProposal", "ViewAck",
                                       "ViewNack",  "ViewCommit",  "Leave"};
  static_assert(sizeof(kNames) / sizeof(kNames[0]) == kNumTypes);
  return kNames[m.index()];
}

std::vector<uint8_t> EncodeEnvelope(const Envelope& envelope) {
  std::vector<uint8_t> out;
  ByteWriter w(&out);
  w.Int<uint32_t>(kEnvelopeMagic);
  w.Int<uint8_t>(kEnvelopeVersion);
  w.Int<uint8_t>(static_cast<uint8_t>(envelope.message.index()));
  w.Int<uint16_t>(0);
  w.Int<uint64_t>(envelope.epoch);
  w.Int<uint32_t>(0);  // body_bytes, patched below
  w.Int<uint32_t>(0);  // crc32c, patched below
  w.String(envelope.from);
  std::visit([&](const auto& m) { WriteBody(w, m); }, envelope.message);
  const uint32_t body_bytes = static_cast<uint32_t>(out.size() - kEnvelopeHeaderBytes);
  std::memcpy(out.data() + 16, &body_bytes, 4);  // x86-64 and every target: little-endian
  uint32_t crc = rt::Crc32c(out.data(), 20);
  crc = rt::Crc32cExtend(crc, out.data() + kEnvelopeHeaderBytes, body_bytes);
  std::memcpy(out.data() + 20, &crc, 4);
  return out;
}

absl::StatusOr<Envelope> DecodeEnvelope(absl::Span<const uint8_t> bytes, const std::string& where) {
  auto bad = [&](const std::string& what) {
    return absl::DataLossError(absl::StrCat("control message on ", where, ": ", what));
  };
  if (bytes.size() < kEnvelopeHeaderBytes) {
    return bad(absl::StrFormat("%d bytes, shorter than the %d-byte header", bytes.size(),
                               kEnvelopeHeaderBytes));
  }
  ByteReader h(bytes.subspan(0, kEnvelopeHeaderBytes));
  const uint32_t magic = h.Int<uint32_t>("magic");
  const uint8_t version = h.Int<uint8_t>("version");
  const uint8_t type = h.Int<uint8_t>("type");
  const uint16_t reserved = h.Int<uint16_t>("reserved");
  Envelope e;
  e.epoch = h.Int<uint64_t>("epoch");
  const uint32_t body_bytes = h.Int<uint32_t>("length");
  const uint32_t stored_crc = h.Int<uint32_t>("crc");
  if (magic != kEnvelopeMagic) return bad(absl::StrFormat("bad magic 0x%08x", magic));
  if (version != kEnvelopeVersion) {
    return bad(absl::StrFormat("unsupported version %d (this binary speaks %d)", version,
                               kEnvelopeVersion));
  }
  if (type >= kNumTypes) return bad(absl::StrFormat("unknown message type %d", type));
  if (reserved != 0) return bad("reserved header bits set");
  if (body_bytes != bytes.size() - kEnvelopeHeaderBytes) {
    return bad(absl::StrFormat("header says %d body bytes, got %d", body_bytes,
                               bytes.size() - kEnvelopeHeaderBytes));
  }
  uint32_t crc = rt::Crc32c(bytes.data(), 20);
  crc = rt::Crc32cExtend(crc, bytes.data() + kEnvelopeHeaderBytes, body_bytes);
  if (crc != stored_crc) {
    return bad(absl::StrFormat("checksum mismatch (stored %08x, computed %08x)", stored_crc, crc));
  }
  ByteReader r(bytes.subspan(kEnvelopeHeaderBytes));
  e.from = ReadString(r, "sender");
  e.message = ReadBody(r, type);
  if (!r.ok()) return bad(r.error());
  if (!r.AtEnd()) return bad("trailing bytes after the message");
  if (e.from.empty()) return bad("empty sender");
  return e;
}

absl::Status EpochGate::Admit(const Envelope& envelope) const {
  if (envelope.epoch >= epoch_) return absl::OkStatus();
  return absl::FailedPreconditionError(
      absl::StrFormat("refused %s from %s: epoch %d is older than the current epoch %d",
                      MessageName(envelope.message), envelope.from, envelope.epoch, epoch_));
}

}  // namespace rt::cluster
