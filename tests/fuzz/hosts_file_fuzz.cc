// Fuzzes the hosts-file parser (net/hosts_file.h) with a resolver that never leaves
// the process: numeric addresses come back in inet_ntop's form, names made of
// [A-Za-z0-9.-] resolve to an address derived from the name, other names fail. A
// parsed list is non-empty, in line order, without two entries for one peer, and every
// entry's endpoint parses back to its own address and port.
#include <arpa/inet.h>

#include <cstdint>
#include <set>
#include <string>
#include <utility>

#include "absl/hash/hash.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "fuzz_check.h"
#include "net/hosts_file.h"

namespace {

absl::StatusOr<std::string> FakeResolve(const std::string& host) {
  char buf[INET6_ADDRSTRLEN];
  in_addr v4;
  in6_addr v6;
  if (inet_pton(AF_INET, host.c_str(), &v4) == 1)
    return std::string(inet_ntop(AF_INET, &v4, buf, sizeof buf));
  if (inet_pton(AF_INET6, host.c_str(), &v6) == 1) {
    return std::string(inet_ntop(AF_INET6, &v6, buf, sizeof buf));
  }
  for (char c : host) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '.' || c == '-';
    if (!ok) return absl::NotFoundError(absl::StrCat("cannot resolve '", host, "'"));
  }
  const size_t h = absl::HashOf(host);
  return absl::StrCat("10.", h & 0xff, ".", (h >> 8) & 0xff, ".", (h >> 16) & 0xff);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::string_view text(reinterpret_cast<const char*>(data), size);
  auto hosts = rt::net::ParseHostsText(text, "fuzz.hosts", FakeResolve);
  if (!hosts.ok()) {
    rt::fuzz::CheckErrorCode(hosts.status(),
                             {absl::StatusCode::kInvalidArgument, absl::StatusCode::kNotFound});
    return 0;
  }
  FUZZ_CHECK(!hosts->empty());
  std::set<std::pair<std::string, uint16_t>> peers;
  int last_line = 0;
  for (const rt::net::HostEntry& e : *hosts) {
    FUZZ_CHECK(e.line > last_line);
    last_line = e.line;
    FUZZ_CHECK(e.port != 0);
    FUZZ_CHECK(peers.insert({e.address, e.port}).second);
    FUZZ_CHECK(e.is_loopback == rt::net::IsLoopbackAddress(e.address));
    std::string host;
    uint16_t port = 0;
    FUZZ_CHECK(rt::net::ParseHostPort(e.Endpoint(), "endpoint", &host, &port).ok());
    FUZZ_CHECK(host == e.address && port == e.port);
  }
  (void)rt::net::AllLoopback(*hosts);
  return 0;
}
