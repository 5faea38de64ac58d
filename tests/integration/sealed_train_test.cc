// Sealed links under attack: 3 `ringtrain train --encrypt on`
// peers where every connection to peer 1 passes through a test relay
// (tests/net/frame_relay.h, via $RINGTRAIN_TEST_DIAL_VIA) that flips a byte of one
// data frame, replays one, or injects a well-formed frame made without the keys.
// Each attack closes that link (logged as an authentication or sequence failure), the
// ring re-forms, training runs to the end, and the replicas stay bit-identical (one
// param_hash at every (epoch, step) any two peers reported). Bounded (~30 s a case).
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "../net/frame_relay.h"
#include "fault_harness.h"

namespace {

using namespace rt::integration::fault;  // NOLINT: test-local harness
using rt::integration::TempDir;
using rt::integration::TestBasePort;
using rt::net::testing::FrameRelay;

}  // namespace

TEST_CASE(
    "sealed train: a relay that flips, replays or injects a frame -- the ring re-forms, replicas "
    "stay identical") {
  TempDir tmp;
  WriteFaultData(tmp / "data");
  const int steps = 30;
  struct Case {
    FrameRelay::Attack attack;
    const char* logged;
  };
  const Case cases[] = {{FrameRelay::Attack::kFlipByte, "failed authentication"},
                        {FrameRelay::Attack::kReplay, "out of sequence"},
                        {FrameRelay::Attack::kInject, "failed authentication"}};
  int k = 0;
  for (const Case& c : cases) {
    CAPTURE(static_cast<int>(c.attack));
    const int base = TestBasePort() + 40 + 5 * k;
    std::vector<std::string> args = TinyTrainArgs(tmp / "data", steps, 24);
    args.push_back("--encrypt=on");
    // Deep enough into the run that the attacked frame is a gradient of a later step.
    FrameRelay relay(static_cast<uint16_t>(base + 1), /*sealed=*/true, c.attack, 30);
    const std::string peer1 = "127.0.0.1:" + std::to_string(base + 1);
    FaultCluster cluster(tmp / ("run" + std::to_string(k++)),
                         FaultCluster::LoopbackEndpoints(3, base), args, nullptr,
                         {"RINGTRAIN_SECRET=sealed-train-test-secret-0123456789",
                          "RINGTRAIN_TEST_DIAL_VIA=" + peer1 + "=" + relay.via()});
    cluster.WriteHostsAll({0, 1, 2});
    for (int i = 0; i < 3; ++i) cluster.Start(i);
    CheckFinal(cluster, {0, 1, 2}, steps, nullptr, 120);
    CHECK(relay.attacks() == 1);
    std::string logs;
    for (int i = 0; i < 3; ++i) logs += cluster.Logs(i);
    CHECK_MESSAGE(logs.find(c.logged) != std::string::npos, cluster.Dump());
    CHECK(logs.find("links are sealed with AES-256-GCM") != std::string::npos);
    // More than one connection went through the relay: the closed link was re-made.
    CHECK(relay.connections() > 1);
  }
}
