// Self identity from --self, --rank, PSSH_NODENUM or the local interfaces (rules in the header).
#include "net/self_identity.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace rt::net {
namespace {

absl::StatusOr<SelfIdentity> FromRank(const std::vector<HostEntry>& hosts, int rank,
                                      const std::string& how) {
  if (rank < 0 || rank >= static_cast<int>(hosts.size())) {
    return absl::OutOfRangeError(
        absl::StrFormat("%s gives rank %d, but the hosts file lists %d peer(s) (ranks 0..%d)", how,
                        rank, hosts.size(), hosts.size() - 1));
  }
  return SelfIdentity{rank, how};
}

std::string ListEntries(const std::vector<HostEntry>& hosts, const std::vector<int>& ranks) {
  std::vector<std::string> parts;
  for (int r : ranks) {
    parts.push_back(absl::StrFormat("rank %d %s (line %d)", r, hosts[r].Endpoint(), hosts[r].line));
  }
  return absl::StrJoin(parts, ", ");
}

}  // namespace

absl::StatusOr<std::vector<std::string>> LocalInterfaceAddresses() {
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) {
    return absl::InternalError(absl::StrFormat("getifaddrs failed: %s", std::strerror(errno)));
  }
  std::vector<std::string> out;
  for (ifaddrs* it = list; it != nullptr; it = it->ifa_next) {
    if (it->ifa_addr == nullptr) continue;
    char buf[INET6_ADDRSTRLEN] = {0};
    if (it->ifa_addr->sa_family == AF_INET) {
      auto* a = reinterpret_cast<const sockaddr_in*>(it->ifa_addr);
      if (inet_ntop(AF_INET, &a->sin_addr, buf, sizeof(buf))) out.emplace_back(buf);
    } else if (it->ifa_addr->sa_family == AF_INET6) {
      auto* a = reinterpret_cast<const sockaddr_in6*>(it->ifa_addr);
      if (inet_ntop(AF_INET6, &a->sin6_addr, buf, sizeof(buf))) out.emplace_back(buf);
    }
  }
  freeifaddrs(list);
  return out;
}

absl::StatusOr<IdentityInputs> IdentityInputsFromEnvironment(const std::string& self_flag,
                                                             int rank_flag) {
  IdentityInputs in;
  in.self = self_flag;
  in.rank = rank_flag;
  if (const char* v = std::getenv("PSSH_NODENUM")) in.pssh_nodenum = std::string(v);
  if (in.self.empty() && in.rank < 0 && !in.pssh_nodenum) {
    auto local = LocalInterfaceAddresses();
    if (!local.ok()) return local.status();
    in.local_addresses = *std::move(local);
  }
  return in;
}

absl::StatusOr<SelfIdentity> ResolveSelfIdentity(const std::vector<HostEntry>& hosts,
                                                 const IdentityInputs& inputs,
                                                 const HostResolver& resolve) {
  if (!inputs.self.empty()) {
    std::string host;
    uint16_t port = 0;
    absl::Status st = ParseHostPort(inputs.self, "--self", &host, &port);
    if (!st.ok()) return st;
    absl::StatusOr<std::string> address = resolve(host);
    if (!address.ok()) {
      return absl::NotFoundError("--self: " + std::string(address.status().message()));
    }
    for (size_t r = 0; r < hosts.size(); ++r) {
      if (hosts[r].address == *address && hosts[r].port == port) {
        return SelfIdentity{static_cast<int>(r), "--self"};
      }
    }
    return absl::NotFoundError(absl::StrFormat(
        "--self %s (%s port %d) is not in the hosts file; pass an entry as written there or "
        "--rank N",
        inputs.self, *address, port));
  }
  if (inputs.rank >= 0) return FromRank(hosts, inputs.rank, "--rank");
  if (inputs.pssh_nodenum) {
    int rank = -1;
    if (!absl::SimpleAtoi(*inputs.pssh_nodenum, &rank)) {
      return absl::InvalidArgumentError(
          absl::StrFormat("PSSH_NODENUM='%s' is not a number", *inputs.pssh_nodenum));
    }
    return FromRank(hosts, rank, "PSSH_NODENUM");
  }
  std::vector<int> matches;
  for (size_t r = 0; r < hosts.size(); ++r) {
    for (const auto& local : inputs.local_addresses) {
      if (local == hosts[r].address) {
        matches.push_back(static_cast<int>(r));
        break;
      }
    }
  }
  if (matches.size() == 1) return SelfIdentity{matches[0], "local interface"};
  if (matches.empty()) {
    return absl::NotFoundError(
        "cannot tell which hosts-file entry is this machine: no entry's address is on a local "
        "interface (behind NAT?). Pass --self HOST:PORT or --rank N, or let parallel-ssh set "
        "PSSH_NODENUM (needs `AcceptEnv PSSH_*` in the remote sshd)");
  }
  return absl::FailedPreconditionError(absl::StrFormat(
      "cannot tell which hosts-file entry is this process: %d entries are on local interfaces "
      "(%s). Pass --self HOST:PORT or --rank N",
      matches.size(), ListEntries(hosts, matches)));
}

}  // namespace rt::net
