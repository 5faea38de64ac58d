// Membership control messages: binary encoding and strict decoding (see messages.h).
#include "cluster/messages.h"

#include <cstring>
#include <type_traits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/crc32c.h"

namespace rt::cluster {
namespace {

// Appends little-endian fields to a byte vector.
class ByteWriter {
 public:
  explicit ByteWriter(std::vector<uint8_t>* out) : out_(out) {}
  template <typename T>
  void Int(T v) {
    static_assert(std::is_integral_v<T>);
    using U = std::make_unsigned_t<T>;
    U u = static_cast<U>(v);
    for (size_t i = 0; i < sizeof(T); ++i) out_->push_back(static_cast<uint8_t>(u >> (8 * i)));
  }
  void Bool(bool b) { out_->push_back(b ? 1 : 0); }
  void String(const std::string& s) {
    Int<uint32_t>(static_cast<uint32_t>(s.size()));
    out_->insert(out_->end(), s.begin(), s.end());
  }
  void Strings(const std::vector<std::string>& v) {
    Int<uint32_t>(static_cast<uint32_t>(v.size()));
    for (const std::string& s : v) String(s);
  }
  void State(const StateVersion& s) {
    Int<uint64_t>(s.epoch);
    Int<int64_t>(s.step);
  }
  void ViewField(const View& v) {
    Int<uint64_t>(v.epoch);
    Strings(v.members);
  }

 private:
  std::vector<uint8_t>* out_;
};

// Reads little-endian fields; the first failure sticks and is reported once.
class ByteReader {
 public:
  explicit ByteReader(absl::Span<const uint8_t> in) : in_(in) {}
  template <typename T>
  T Int(const char* what) {
    static_assert(std::is_integral_v<T>);
    if (!Need(sizeof(T), what)) return 0;
    std::make_unsigned_t<T> u = 0;
    for (size_t i = 0; i < sizeof(T); ++i) {
      u |= static_cast<std::make_unsigned_t<T>>(in_[pos_ + i]) << (8 * i);
    }
    pos_ += sizeof(T);
    return static_cast<T>(u);
  }
  bool Bool(const char* what) {
    const uint8_t b = Int<uint8_t>(what);
    if (b > 1) Fail(absl::StrCat(what, ": bad bool ", b));
    return b == 1;
  }
  std::string String(const char* what) {
    const uint32_t n = Int<uint32_t>(what);
    if (n > kMaxStringBytes) {
      Fail(absl::StrFormat("%s: string of %d bytes exceeds %d", what, n, kMaxStringBytes));
      return "";
    }
    if (!Need(n, what)) return "";
    std::string s(reinterpret_cast<const char*>(in_.data() + pos_), n);
    pos_ += n;
    return s;
  }
  std::vector<std::string> Strings(const char* what) {
    const uint32_t n = Int<uint32_t>(what);
    std::vector<std::string> v;
    if (n > kMaxListItems) {
      Fail(absl::StrFormat("%s: list of %d items exceeds %d", what, n, kMaxListItems));
      return v;
    }
    for (uint32_t i = 0; i < n && ok(); ++i) v.push_back(String(what));
    return v;
  }
  StateVersion State(const char* what) {
    StateVersion s;
    s.epoch = Int<uint64_t>(what);
    s.step = Int<int64_t>(what);
    if (s.step < -1) Fail(absl::StrCat(what, ": bad step ", s.step));
    return s;
  }
  View ViewField(const char* what) {
    View v;
    v.epoch = Int<uint64_t>(what);
    v.members = Strings(what);
    return v;
  }
  bool ok() const { return error_.empty(); }
  bool AtEnd() const { return pos_ == in_.size(); }
  const std::string& error() const { return error_; }
  void Fail(const std::string& e) {
    if (error_.empty()) error_ = e;
  }

 private:
  bool Need(size_t n, const char* what) {
    if (!ok()) return false;
    if (in_.size() - pos_ < n) {
      Fail(absl::StrCat(what, ": truncated"));
      return false;
    }
    return true;
  }
  absl::Span<const uint8_t> in_;
  size_t pos_ = 0;
  std::string error_;
};

void WriteBody(ByteWriter& w, const Heartbeat& m) {
  w.ViewField(m.view);
  w.State(m.state);
  w.Int<uint32_t>(m.hosts_fingerprint);
  w.Bool(m.training);
  w.Bool(m.disrupted);
  w.Strings(m.suspects);
}
void WriteBody(ByteWriter& w, const JoinRequest& m) {
  w.State(m.state);
  w.Int<uint32_t>(m.hosts_fingerprint);
}
void WriteBody(ByteWriter& w, const ViewProposal& m) { w.ViewField(m.view); }
void WriteBody(ByteWriter& w, const ViewAck& m) {
  w.Int<uint64_t>(m.epoch);
  w.State(m.state);
}
void WriteBody(ByteWriter& w, const ViewNack& m) {
  w.Int<uint64_t>(m.epoch);
  w.Int<uint64_t>(m.promised_epoch);
  w.String(m.promised_to);
}
void WriteBody(ByteWriter& w, const ViewCommit& m) {
  w.ViewField(m.view);
  w.State(m.agreement.resume);
  w.String(m.agreement.source);
  w.Int<int64_t>(m.agreement.min_step);
  w.Strings(m.agreement.need_state);
}
void WriteBody(ByteWriter& w, const Leave& m) { w.String(m.reason); }

Message ReadBody(ByteReader& r, uint8_t type) {
  switch (type) {
    case 0: {
      Heartbeat m;
      m.view = r.ViewField("heartbeat view");
      m.state = r.State("heartbeat state");
      m.hosts_fingerprint = r.Int<uint32_t>("heartbeat hosts fingerprint");
      m.training = r.Bool("heartbeat training");
      m.disrupted = r.Bool("heartbeat disrupted");
      m.suspects = r.Strings("heartbeat suspects");
      return m;
    }
    case 1: {
      JoinRequest m;
      m.state = r.State("join state");
      m.hosts_fingerprint = r.Int<uint32_t>("join hosts fingerprint");
      return m;
    }
    case 2: {
      ViewProposal m;
      m.view = r.ViewField("proposal view");
      return m;
    }
    case 3: {
      ViewAck m;
      m.epoch = r.Int<uint64_t>("ack epoch");
      m.state = r.State("ack state");
      return m;
    }
    case 4: {
      ViewNack m;
      m.epoch = r.Int<uint64_t>("nack epoch");
      m.promised_epoch = r.Int<uint64_t>("nack promised epoch");
      m.promised_to = r.String("nack promised to");
      return m;
    }
    case 5: {
      ViewCommit m;
      m.view = r.ViewField("commit view");
      m.agreement.resume = r.State("commit resume");
      m.agreement.source = r.String("commit source");
      m.agreement.min_step = r.Int<int64_t>("commit min step");
      m.agreement.need_state = r.Strings("commit need_state");
      return m;
    }
    default: {
      Leave m;
      m.reason = r.String("leave reason");
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
  e.from = r.String("sender");
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
