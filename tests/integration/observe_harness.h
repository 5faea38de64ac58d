// Helpers for the status-page tests: a ring of FaultCluster peers with `--http`, and
// reading their pages.
#pragma once

#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "fault_harness.h"
#include "observe/http_test_client.h"
#include "observe/json.h"

namespace rt::integration::observe_test {

using rt::integration::fault::FaultCluster;
using rt::integration::fault::NowS;

// The body of GET path from 127.0.0.1:port ("" if no 200 answer).
inline std::string HttpBody(int port, const std::string& path) {
  const std::string answer = rt::observe::testing::Get(static_cast<uint16_t>(port), path);
  if (answer.rfind("HTTP/1.1 200 ", 0) != 0) return "";
  return rt::observe::testing::Body(answer);
}

// /api/status of the peer on `port`, parsed (an empty object if unreachable).
inline rt::observe::JsonValue ApiStatus(int port) {
  absl::StatusOr<rt::observe::JsonValue> v = rt::observe::ParseJson(HttpBody(port, "/api/status"));
  return v.ok() ? *v : rt::observe::JsonValue();
}

// The peer row of `peer` in a status object (nullptr if absent).
inline const rt::observe::JsonValue* PeerRow(const rt::observe::JsonValue& status,
                                             const std::string& peer) {
  const rt::observe::JsonValue* peers = status.Find("peers");
  if (peers == nullptr) return nullptr;
  for (const rt::observe::JsonValue& p : peers->items()) {
    if (p.StringOr("peer", "") == peer) return &p;
  }
  return nullptr;
}

// Number of peers a status object lists as training.
inline int TrainingPeers(const rt::observe::JsonValue& status) {
  const rt::observe::JsonValue* peers = status.Find("peers");
  int n = 0;
  if (peers == nullptr) return 0;
  for (const rt::observe::JsonValue& p : peers->items()) n += p.StringOr("state", "") == "training";
  return n;
}

// Polls pred every 50 ms for up to timeout_s; true once it holds.
template <typename Pred>
bool PollUntil(Pred pred, double timeout_s) {
  const double end = NowS() + timeout_s;
  while (NowS() < end) {
    if (pred()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return pred();
}

}  // namespace rt::integration::observe_test
