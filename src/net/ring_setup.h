// JoinRing: from command-line values to a formed TcpRing (what `train` and
// `bench allreduce` call): hosts file -> self identity -> shared secret -> node -> ring.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "net/handshake.h"
#include "net/tcp_ring.h"

namespace rt::net {

struct RingSetup {
  std::string hosts_path;        // --hosts
  std::string self;              // --self HOST:PORT ("" = not given)
  int rank = -1;                 // --rank (-1 = not given)
  std::string secret_file;       // --secret-file ("" = $RINGTRAIN_SECRET, optional on loopback)
  std::string encrypt = "auto";  // --encrypt auto|on|off (ResolveEncrypt)
  absl::Duration wait = absl::Seconds(120);  // --wait
  std::string cluster_id = "ringtrain";      // job name; must match on every peer
  Fingerprint fingerprint;  // e.g. {"model", cfg.ToString()}, {"data", dataset.fingerprint()}
  std::vector<int> order;   // ring order as hosts-file ranks; empty = file order
};

// Loads the hosts file, resolves who this process is (logs how), loads the secret,
// tags log lines with the rank (SetLogRank), listens, and forms the ring.
absl::StatusOr<std::unique_ptr<TcpRing>> JoinRing(const RingSetup& setup);

}  // namespace rt::net
