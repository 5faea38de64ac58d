// Views and quorum (see view.h).
#include "cluster/view.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "core/crc32c.h"

namespace rt::cluster {
namespace {

const PeerId kNoPeer;

uint32_t CrcOfStrings(uint32_t crc, const std::vector<PeerId>& v) {
  for (const PeerId& p : v) {
    const uint32_t n = static_cast<uint32_t>(p.size());
    crc = rt::Crc32cExtend(crc, &n, sizeof(n));
    crc = rt::Crc32cExtend(crc, p.data(), p.size());
  }
  return crc;
}

}  // namespace

std::string PeerNames(const std::vector<PeerId>& peers) {
  return peers.empty() ? "none" : absl::StrJoin(peers, " ");
}

const PeerId& View::leader() const { return members.empty() ? kNoPeer : members.front(); }

bool View::Contains(absl::string_view peer) const { return Position(peer) >= 0; }

int View::Position(absl::string_view peer) const {
  for (size_t i = 0; i < members.size(); ++i) {
    if (members[i] == peer) return static_cast<int>(i);
  }
  return -1;
}

const PeerId& View::Successor(absl::string_view peer) const {
  const int i = Position(peer);
  if (i < 0) return kNoPeer;
  return members[(static_cast<size_t>(i) + 1) % members.size()];
}

const PeerId& View::Predecessor(absl::string_view peer) const {
  const int i = Position(peer);
  if (i < 0) return kNoPeer;
  return members[(static_cast<size_t>(i) + members.size() - 1) % members.size()];
}

std::string View::ToString() const {
  return absl::StrFormat("epoch %d [%s] leader %s", epoch, absl::StrJoin(members, " "),
                         members.empty() ? "-" : leader());
}

uint32_t View::Fingerprint() const {
  uint32_t crc = rt::Crc32c(&epoch, sizeof(epoch));
  return CrcOfStrings(crc, members);
}

int QuorumSize(int hosts_in_file, int min_peers) {
  return min_peers > 0 ? min_peers : hosts_in_file / 2 + 1;
}

bool HasQuorum(const std::vector<PeerId>& alive, const std::vector<PeerId>& hosts, int min_peers,
               std::string* reason) {
  int count = 0;
  std::vector<PeerId> unreachable;
  for (const PeerId& h : hosts) {
    if (std::find(alive.begin(), alive.end(), h) != alive.end()) {
      ++count;
    } else {
      unreachable.push_back(h);
    }
  }
  const int needed = QuorumSize(static_cast<int>(hosts.size()), min_peers);
  if (count >= needed) return true;
  if (reason) {
    *reason = absl::StrFormat(
        "no quorum: %d of %d hosts reachable, %d needed%s", count, hosts.size(), needed,
        unreachable.empty()
            ? std::string()
            : absl::StrCat(" (unreachable: ", absl::StrJoin(unreachable, " "), ")"));
  }
  return false;
}

std::string MinPeersWarning(int hosts_in_file, int min_peers) {
  if (min_peers <= 0) return "";
  if (min_peers > hosts_in_file) {
    return absl::StrFormat(
        "--min-peers %d exceeds the %d hosts in the file: training can never start", min_peers,
        hosts_in_file);
  }
  if (2 * min_peers <= hosts_in_file) {
    return absl::StrFormat(
        "--min-peers %d is not more than half of the %d hosts: a network partition can let two "
        "groups train diverging models",
        min_peers, hosts_in_file);
  }
  return "";
}

uint32_t HostsFingerprint(const std::vector<PeerId>& hosts) { return CrcOfStrings(0, hosts); }

int RankOf(const std::vector<PeerId>& hosts, absl::string_view peer) {
  for (size_t i = 0; i < hosts.size(); ++i) {
    if (hosts[i] == peer) return static_cast<int>(i);
  }
  return -1;
}

}  // namespace rt::cluster
