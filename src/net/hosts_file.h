// The hosts file: who is in the ring, in rank order (DESIGN "Files").
//
// Format: one peer per line, `HOST[:PORT]`; `#` starts a comment; blank lines are
// ignored; the default port is 29500. HOST is an IPv4 address, an IPv6 address in
// brackets (`[::1]:29501`, `[fe80::1]`) or a host name, resolved once here with
// getaddrinfo. Line order is rank order (the first entry is rank 0). Two entries
// with the same resolved address and port, a name that does not resolve, or a bad
// port are errors naming `file:line`.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace rt::net {

inline constexpr uint16_t kDefaultPort = 29500;

struct HostEntry {
  std::string host;     // as written (without brackets)
  uint16_t port = 0;    // as written or kDefaultPort
  std::string address;  // numeric address after resolution ("10.0.0.2", "::1")
  bool is_ipv6 = false;
  bool is_loopback = false;      // 127.0.0.0/8 or ::1
  int line = 0;                  // 1-based line in the source
  std::string Endpoint() const;  // "10.0.0.2:29500" or "[::1]:29500"
};

// Resolves a host name (or numeric address) to one numeric address; errors say why.
using HostResolver = std::function<absl::StatusOr<std::string>(const std::string& host)>;
// getaddrinfo (AF_UNSPEC, SOCK_STREAM), first result; numeric addresses pass through.
absl::StatusOr<std::string> ResolveHostWithGetaddrinfo(const std::string& host);

// Splits "HOST[:PORT]" / "[V6]:PORT" / "[V6]" into host and port (default_port if absent).
// Errors name `where` (e.g. "hosts:3").
absl::Status ParseHostPort(absl::string_view text, const std::string& where, std::string* host,
                           uint16_t* port);

// Parses hosts-file text; `source` names it in errors ("hosts.txt"). An empty list is an error.
absl::StatusOr<std::vector<HostEntry>> ParseHostsText(
    absl::string_view text, const std::string& source,
    const HostResolver& resolve = ResolveHostWithGetaddrinfo);
// Reads and parses a hosts file.
absl::StatusOr<std::vector<HostEntry>> LoadHostsFile(
    const std::string& path, const HostResolver& resolve = ResolveHostWithGetaddrinfo);

// True when the numeric address is loopback (127/8, ::1, ::ffff:127.x).
bool IsLoopbackAddress(const std::string& numeric_address);
// True when every entry is loopback (then a shared secret is optional).
bool AllLoopback(const std::vector<HostEntry>& hosts);

}  // namespace rt::net
