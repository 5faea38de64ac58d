// The dashboard page served at `/`: one self-contained HTML file
// (inline CSS, JavaScript and SVG; nothing from another host) that reads
// /api/status every few seconds and draws the loss and validation bits-per-byte
// curves, tokens/s, each peer's share of time in compute / comm / waiting, the peers
// table and the events. Readable on a phone (one column, the table scrolls).
//
// For tests and scripts the drawn DOM carries data: `#loss-chart[data-points]` (the
// points of the train loss curve; fewer once the history thins, observe/step_history.h)
// and `[data-last]` (the newest step it draws), `tr.peer[data-peer][data-state]` per peer,
// `li.event[data-kind]` per event, `#state[data-state]`.
#pragma once

#include <string>

namespace rt::observe {

const std::string& DashboardPage();

}  // namespace rt::observe
