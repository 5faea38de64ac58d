// The data phase of a peer, before it trains: make sure --data holds the prepared
// directory, fetching what is missing from the other peers of the hosts file, while
// serving what this peer holds (and relaying what it receives) to the peers fetching
// after it.
//
// Where it runs: `ringtrain fetch-data` (the phase alone, and then serving until every
// peer of the hosts file has the data), and `ringtrain train --hosts` when its data
// directory is incomplete (the phase, then the ring; a training peer serves its data
// on the ring port from then on: see src/cli/train.cc). The phase listens on this
// peer's hosts-file port with a node of its own that answers data-fetch clients only
// (net::TcpNodeOptions::observers_only: a peer without data has no fingerprint to
// compare; ring peers dialing it are told to retry), and closes it before the ring's
// node binds the same port.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "fetch/data_fetcher.h"
#include "net/hosts_file.h"

namespace rt::fetch {

struct FetchPhaseOptions {
  std::string dir;
  std::vector<net::HostEntry> hosts;
  int self_rank = -1;
  std::string secret;
  bool encrypt = false;
  std::string cluster_id;
  absl::Duration wait = absl::Seconds(120);
  // After this peer is complete, keep serving until every peer of the hosts file has
  // said it is complete (each seen once), then `linger` more so the last ones can see
  // this peer complete too.
  bool serve_until_all_complete = false;
  absl::Duration linger = absl::Seconds(3);
  // Polled while waiting (FetcherOptions::stop): true = give up at once with Cancelled.
  std::function<bool()> stop;
};

// Runs the phase (see the file comment); OK once this peer's directory is complete
// (and, with serve_until_all_complete, every peer's); Cancelled soon after `stop`.
absl::Status RunFetchPhase(const FetchPhaseOptions& options, FetchReport* report);

// True if `dir` holds a complete data directory (local_data.h's test: a manifest and
// every listed file at its size), without contacting anyone.
bool DataDirComplete(const std::string& dir);

}  // namespace rt::fetch
