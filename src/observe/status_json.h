// The status of the ring as JSON: the body of `/api/status`, of `ringtrain status
// --json` and of the status channel's answer (DESIGN: at least state, epoch, leader,
// step and peers, each peer with peer, state, step, tokens_per_s).
//
//   {"time", "unix_ms", "self", "ring", "state", "reason", "epoch", "leader",
//    "members", "hosts", "quorum", "step", "tokens", "loss", "val_loss", "val_bpb",
//    "val_step", "checkpoint": {"step", "age_s", "peer", "where"} | null,
//    "peers": [{"peer", "self", "alive", "in_view", "state", "reason", "step", "epoch",
//               "tokens_per_s", "step_ms", "compute_ms", "comm_ms", "wait_ms", "slots",
//               "loss", "bytes_sent", "rss_bytes", "mem_available_bytes",
//               "mem_total_bytes", "cpu_steal", "load1", "cpus", "disk_free_bytes",
//               "checkpoint", "links": [{"to", "bytes_per_s", "rtt_s"}], "version",
//               "age_s", "uptime_s"}],
//    "events": [event_log.h EventJson, oldest first],
//    "history": {"step": [...], "unix_ms", "tokens", "loss", "tokens_per_s",
//                "val_loss", "val_bpb"}}          (columns; only with `history`)
// Unknown numbers are null.
#pragma once

#include <string>

#include "observe/status_board.h"

namespace rt::observe {

struct StatusJsonOptions {
  bool history = true;
  size_t max_events = 100;  // the newest ones
};

std::string StatusJson(const StatusSnapshot& s, const StatusJsonOptions& options = {});

}  // namespace rt::observe
