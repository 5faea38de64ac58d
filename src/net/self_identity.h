// Self identity: which hosts-file entry is this process (DESIGN "Command-line contract").
//
// Rules, first that applies wins:
//   1. --self HOST:PORT   the entry with that resolved address and port;
//   2. --rank N           line N (0-based) of the hosts file;
//   3. $PSSH_NODENUM      set by parallel-ssh (reaches the remote side only if its sshd
//                         has `AcceptEnv PSSH_*`), used like --rank;
//   4. the single entry whose address is on a local interface (getifaddrs).
// Errors: --self not in the file, rank out of range, a non-numeric PSSH_NODENUM, no
// local entry, several local entries (e.g. a loopback ring: pass --self or --rank).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "net/hosts_file.h"

namespace rt::net {

struct IdentityInputs {
  std::string self;                          // --self, "" if not given
  int rank = -1;                             // --rank, -1 if not given
  std::optional<std::string> pssh_nodenum;   // $PSSH_NODENUM if set
  std::vector<std::string> local_addresses;  // numeric addresses of local interfaces
};

// Numeric addresses of all local interfaces (IPv4 and IPv6, scope ids dropped).
absl::StatusOr<std::vector<std::string>> LocalInterfaceAddresses();

// Inputs from flags plus the environment and getifaddrs.
absl::StatusOr<IdentityInputs> IdentityInputsFromEnvironment(const std::string& self_flag,
                                                             int rank_flag);

struct SelfIdentity {
  int rank = -1;
  std::string how;  // "--self", "--rank", "PSSH_NODENUM", "local interface" (for logs)
};

// Applies the rules above; `resolve` resolves --self's host like the hosts file did.
absl::StatusOr<SelfIdentity> ResolveSelfIdentity(
    const std::vector<HostEntry>& hosts, const IdentityInputs& inputs,
    const HostResolver& resolve = ResolveHostWithGetaddrinfo);

}  // namespace rt::net
