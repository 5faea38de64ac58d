// Views and quorum: who is in the training ring now, who leads, and whether the
// members may train at all (DESIGN invariant 4).
//
// A peer is named by its PeerId, the endpoint string of its hosts-file entry
// ("10.0.0.2:29500", net::HostEntry::Endpoint()); its rank is its line index in the
// hosts file. A View is an epoch plus the member list in rank order (ring order);
// the leader is the lowest-ranked member, members.front(). Epochs only grow: a view
// with a larger epoch supersedes every view with a smaller one.
//
// Quorum: a view may train only if it has at least QuorumSize() members that are in
// the current (agreed) hosts file: more than half of the file's entries, or exactly
// `min_peers` when that is given (> 0). A min_peers at or below half of the file lets
// two sides of a partition train at once; MinPeersWarning() says so.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace rt::cluster {

using PeerId = std::string;

// "a:1 b:2" for logs, "none" for an empty list.
std::string PeerNames(const std::vector<PeerId>& peers);

struct View {
  uint64_t epoch = 0;
  std::vector<PeerId> members;  // rank order; empty = no view yet

  bool empty() const { return members.empty(); }
  // The lowest-ranked member; "" if the view is empty.
  const PeerId& leader() const;
  bool Contains(absl::string_view peer) const;
  // Index of `peer` in members (its ring position), -1 if absent.
  int Position(absl::string_view peer) const;
  // Ring neighbours of a member (wrapping); "" if `peer` is not a member.
  const PeerId& Successor(absl::string_view peer) const;
  const PeerId& Predecessor(absl::string_view peer) const;
  // "epoch 3 [a b c] leader a".
  std::string ToString() const;
  // crc32c of epoch and members: ring handshakes compare it so that two peers only
  // form a ring when they installed the very same view.
  uint32_t Fingerprint() const;

  bool operator==(const View& o) const { return epoch == o.epoch && members == o.members; }
  bool operator!=(const View& o) const { return !(*this == o); }
};

// Members needed to train with `hosts_in_file` entries: min_peers if > 0, else
// hosts_in_file / 2 + 1.
int QuorumSize(int hosts_in_file, int min_peers);

// Counts the peers of `alive` that are in `hosts`; true if that count reaches
// QuorumSize. Otherwise *reason (if non-null) says why, e.g. "no quorum: 2 of 5
// hosts reachable, 3 needed (unreachable: c:1 d:1 e:1)".
bool HasQuorum(const std::vector<PeerId>& alive, const std::vector<PeerId>& hosts, int min_peers,
               std::string* reason);

// Non-empty when min_peers allows a partition to produce two training sides, or can
// never be reached.
std::string MinPeersWarning(int hosts_in_file, int min_peers);

// crc32c of the hosts list (order matters): peers exchange it to detect edited files
// that were not copied everywhere.
uint32_t HostsFingerprint(const std::vector<PeerId>& hosts);

// Rank of `peer` in `hosts` (its index), or -1.
int RankOf(const std::vector<PeerId>& hosts, absl::string_view peer);

}  // namespace rt::cluster
