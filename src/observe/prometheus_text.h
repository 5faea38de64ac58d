// `/metrics`: the status of the ring in Prometheus' text exposition format (0.0.4).
// Names start with `ringtrain_` and carry their unit (`_seconds`, `_bytes`, `_ratio`,
// `_total` for counters); every family has HELP and TYPE lines. Per-peer figures are
// labelled `peer="HOST:PORT"` (this peer's and every other peer's it has a report
// of), cluster-level ones (epoch, peers, quorum, losses, last checkpoint) are not.
// Unknown values are left out rather than written as NaN.
#pragma once

#include <string>

#include "observe/status_board.h"

namespace rt::observe {

std::string PrometheusText(const StatusSnapshot& s);

// A label value escaped for the exposition format (backslash, quote, newline).
std::string PrometheusLabelValue(const std::string& v);

}  // namespace rt::observe
