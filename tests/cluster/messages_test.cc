// Control message envelopes: round trip of every message type, strict decoding of
// damaged or hostile bytes, and the epoch gate.
#include "cluster/messages.h"

#include <doctest/doctest.h>

#include <cstring>

#include "core/crc32c.h"

namespace rt::cluster {
namespace {

std::vector<Envelope> Samples() {
  Heartbeat hb;
  hb.view = View{7, {"10.0.0.1:29500", "10.0.0.2:29500"}};
  hb.state = {7, 1234};
  hb.hosts_fingerprint = 0xdeadbeef;
  hb.training = true;
  hb.disrupted = true;
  hb.suspects = {"10.0.0.3:29500"};
  hb.report = {1, 2, 3, 0, 255};
  StepAgreement agreement;
  agreement.resume = {8, 99};
  agreement.source = "b";
  agreement.min_step = 98;
  agreement.need_state = {"c", "d"};
  return {
      {7, "a", hb},
      {3, "b", JoinRequest{{2, -1}, 42}},
      {8, "a", ViewProposal{View{8, {"a", "b"}}}},
      {8, "b", ViewAck{8, {7, 1234}}},
      {9, "c", ViewNack{8, 9, "x"}},
      {8, "a", ViewCommit{View{8, {"a", "b"}}, agreement}},
      {8, "z", Leave{"removed from the hosts file"}},
      {8, "y", Leave{"finished training at step 20", 20}},
  };
}

}  // namespace

TEST_CASE("every message type round-trips through the envelope") {
  for (const Envelope& e : Samples()) {
    const std::vector<uint8_t> bytes = EncodeEnvelope(e);
    auto d = DecodeEnvelope(bytes, "test");
    REQUIRE_MESSAGE(d.ok(), d.status().ToString());
    CHECK(d->epoch == e.epoch);
    CHECK(d->from == e.from);
    REQUIRE(d->message.index() == e.message.index());
    CHECK(EncodeEnvelope(*d) == bytes);  // all fields survived
  }
  auto d = DecodeEnvelope(EncodeEnvelope(Samples()[0]), "t");
  const auto& hb = std::get<Heartbeat>(d->message);
  CHECK(hb.view.members.size() == 2);
  CHECK(hb.state.step == 1234);
  CHECK(hb.training);
  CHECK(hb.suspects == std::vector<PeerId>{"10.0.0.3:29500"});
  CHECK(hb.report == std::vector<uint8_t>{1, 2, 3, 0, 255});
  const Envelope commit_envelope = DecodeEnvelope(EncodeEnvelope(Samples()[5]), "t").value();
  const auto& commit = std::get<ViewCommit>(commit_envelope.message);
  CHECK(commit.agreement.need_state == std::vector<PeerId>{"c", "d"});
  CHECK(commit.agreement.min_step == 98);
  const Envelope leave_envelope = DecodeEnvelope(EncodeEnvelope(Samples()[7]), "t").value();
  CHECK(std::get<Leave>(leave_envelope.message).last_step == 20);
  CHECK(std::get<Leave>(DecodeEnvelope(EncodeEnvelope(Samples()[6]), "t")->message).last_step ==
        -1);
}

TEST_CASE("damaged envelopes are refused with DataLoss, never crash") {
  for (const Envelope& e : Samples()) {
    const std::vector<uint8_t> good = EncodeEnvelope(e);
    for (size_t i = 0; i < good.size(); ++i) {
      for (uint8_t flip : {0x01, 0x80}) {
        std::vector<uint8_t> bad = good;
        bad[i] ^= flip;
        auto d = DecodeEnvelope(bad, "link");
        CHECK_MESSAGE(!d.ok(), "flip at ", i, " accepted for ", MessageName(e.message));
        CHECK(absl::IsDataLoss(d.status()));
      }
    }
    for (size_t n = 0; n < good.size(); ++n) {
      CHECK(!DecodeEnvelope(absl::MakeConstSpan(good.data(), n), "link").ok());
    }
  }
  auto d = DecodeEnvelope(std::vector<uint8_t>(3, 0), "control link to x");
  CHECK(std::string(d.status().message()).find("control link to x") != std::string::npos);
}

TEST_CASE("hostile lengths are bounded before allocation") {
  // A well-formed header whose body claims a 4 GB string: must fail cleanly.
  Envelope e{1, "a", Leave{"r"}};
  std::vector<uint8_t> bytes = EncodeEnvelope(e);
  // body = sender string (u32 len + 'a') + reason string; make the reason length huge
  // and fix up the crc so only the bound check can catch it.
  const size_t reason_len_at = kEnvelopeHeaderBytes + 4 + 1;
  bytes[reason_len_at + 3] = 0x7f;
  uint32_t crc = rt::Crc32c(bytes.data(), 20);
  crc = rt::Crc32cExtend(crc, bytes.data() + kEnvelopeHeaderBytes,
                         bytes.size() - kEnvelopeHeaderBytes);
  std::memcpy(bytes.data() + 20, &crc, 4);
  auto d = DecodeEnvelope(bytes, "x");
  REQUIRE(!d.ok());
  CHECK(std::string(d.status().message()).find("exceeds") != std::string::npos);
}

TEST_CASE("epoch gate refuses older epochs and never goes back") {
  EpochGate gate(5);
  CHECK(gate.Admit(Envelope{5, "a", Leave{}}).ok());
  CHECK(gate.Admit(Envelope{6, "a", Leave{}}).ok());
  absl::Status s = gate.Admit(Envelope{4, "b", ViewAck{}});
  CHECK(absl::IsFailedPrecondition(s));
  CHECK(std::string(s.message()) ==
        "refused ViewAck from b: epoch 4 is older than the current epoch 5");
  gate.Advance(3);
  CHECK(gate.epoch() == 5);
  gate.Advance(9);
  CHECK(!gate.Admit(Envelope{8, "a", Leave{}}).ok());
}

}  // namespace rt::cluster

namespace rt::cluster {

TEST_CASE("a heartbeat report larger than kMaxReportBytes is refused") {
  Heartbeat hb;
  hb.report.assign(kMaxReportBytes, 7);
  CHECK(DecodeEnvelope(EncodeEnvelope({1, "a", hb}), "t").ok());
  hb.report.push_back(7);
  auto d = DecodeEnvelope(EncodeEnvelope({1, "a", hb}), "t");
  REQUIRE(!d.ok());
  CHECK(std::string(d.status().message()).find("heartbeat report") != std::string::npos);
}

}  // namespace rt::cluster
