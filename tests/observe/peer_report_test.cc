// Status reports: round trip, the size bound (oldest events dropped), strict decoding.
#include "observe/peer_report.h"

#include <doctest/doctest.h>

namespace rt::observe {
namespace {

PeerReport Sample() {
  PeerReport r;
  r.figures.peer = "10.0.0.2:29500";
  r.figures.version = "0.1+abc";
  r.figures.state = "paused";
  r.figures.reason = "no quorum: 1 of 3 hosts reachable, 2 needed";
  r.figures.step = 42;
  r.figures.tokens = 1 << 20;
  r.figures.loss = 3.25;
  r.figures.tokens_per_s = 1234.5;
  r.figures.slots = 7;
  r.figures.rss_bytes = 123456789;
  r.figures.cpu_steal = 0.125;
  r.figures.ckpt_step = 40;
  r.figures.ckpt_where = "/var/lib/ringtrain/ckpt";
  r.figures.links = {{"10.0.0.3:29500", 1.1e8, 2e-4}};
  for (uint32_t i = 1; i <= 5; ++i) {
    ClusterEvent e;
    e.unix_ms = 1000 * i;
    e.origin = r.figures.peer;
    e.seq = i;
    e.kind = "view_change";
    e.epoch = i;
    e.message = "view " + std::to_string(i);
    e.members = {"a", "b"};
    e.left = {"c"};
    r.events.push_back(e);
  }
  return r;
}

}  // namespace

TEST_CASE("a peer report round-trips every field") {
  const PeerReport r = Sample();
  const std::vector<uint8_t> bytes = EncodePeerReport(r, 8192);
  auto d = DecodePeerReport(bytes, "p");
  REQUIRE_MESSAGE(d.ok(), d.status().ToString());
  CHECK(d->figures.peer == r.figures.peer);
  CHECK(d->figures.reason == r.figures.reason);
  CHECK(d->figures.step == 42);
  CHECK(d->figures.loss == 3.25);
  CHECK(std::isnan(d->figures.val_loss));
  CHECK(d->figures.slots == 7);
  CHECK(d->figures.cpu_steal == 0.125);
  REQUIRE(d->figures.links.size() == 1);
  CHECK(d->figures.links[0].bytes_per_s == 1.1e8);
  REQUIRE(d->events.size() == 5);
  CHECK(d->events[4].message == "view 5");
  CHECK(d->events[4].left == std::vector<std::string>{"c"});
  CHECK(EncodePeerReport(*d, 8192) == bytes);
}

TEST_CASE("a report is cut to its bound by dropping the oldest events") {
  PeerReport r = Sample();
  const size_t full = EncodePeerReport(r, 1 << 20).size();
  const std::vector<uint8_t> cut = EncodePeerReport(r, full - 1);
  CHECK(cut.size() < full);
  auto d = DecodePeerReport(cut, "p");
  REQUIRE(d.ok());
  REQUIRE(d->events.size() == 4);
  CHECK(d->events.front().seq == 2);  // the oldest went
  // Long strings are cut, never refused.
  r.figures.reason = std::string(10000, 'x');
  auto long_reason = DecodePeerReport(EncodePeerReport(r, 1 << 20), "p");
  REQUIRE(long_reason.ok());
  CHECK(long_reason->figures.reason.size() == kMaxFieldBytes);
}

TEST_CASE("damaged reports are refused with DataLoss naming the peer, never crash") {
  const std::vector<uint8_t> good = EncodePeerReport(Sample(), 8192);
  for (size_t n = 0; n < good.size(); ++n) {
    auto d = DecodePeerReport(absl::MakeConstSpan(good.data(), n), "10.0.0.9:1");
    REQUIRE(!d.ok());
    CHECK(absl::IsDataLoss(d.status()));
    CHECK(std::string(d.status().message()).find("10.0.0.9:1") != std::string::npos);
  }
  std::vector<uint8_t> trailing = good;
  trailing.push_back(0);
  CHECK(!DecodePeerReport(trailing, "p").ok());
  std::vector<uint8_t> version = good;
  version[4] = 99;
  CHECK(!DecodePeerReport(version, "p").ok());
  // Every single-byte change either decodes or is refused cleanly.
  for (size_t i = 0; i < good.size(); ++i) {
    std::vector<uint8_t> bad = good;
    bad[i] ^= 0xff;
    (void)DecodePeerReport(bad, "p");
  }
}

}  // namespace rt::observe
