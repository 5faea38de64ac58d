// Hosts-file parsing: comments, blanks, default port, IPv6, names, and every error.
#include "net/hosts_file.h"

#include <doctest/doctest.h>

#include <cstdio>
#include <fstream>
#include <string>

namespace {

using rt::net::HostEntry;
using rt::net::ParseHostsText;

// Resolves a few fixed names without DNS, so tests are fast and hermetic.
absl::StatusOr<std::string> FakeResolve(const std::string& host) {
  if (host == "alpha") return std::string("10.0.0.1");
  if (host == "beta") return std::string("10.0.0.2");
  if (host == "alpha-alias") return std::string("10.0.0.1");
  if (host.find_first_not_of("0123456789.") == std::string::npos ||
      host.find(':') != std::string::npos) {
    return host;
  }
  return absl::NotFoundError("cannot resolve host name '" + host + "': unknown host");
}

}  // namespace

TEST_CASE("hosts file: comments, blank lines, default port, IPv4, IPv6 and names") {
  auto hosts = ParseHostsText(
      "# cluster\n"
      "\n"
      "10.0.0.5            # first\n"
      "  10.0.0.6:29501  \n"
      "[::1]:29502\n"
      "[fe80::2]\n"
      "beta:7000\n",
      "hosts", FakeResolve);
  REQUIRE(hosts.ok());
  REQUIRE(hosts->size() == 5);
  const auto& h = *hosts;
  CHECK(h[0].address == "10.0.0.5");
  CHECK(h[0].port == rt::net::kDefaultPort);
  CHECK(h[0].line == 3);
  CHECK(h[1].port == 29501);
  CHECK(h[2].address == "::1");
  CHECK(h[2].is_ipv6);
  CHECK(h[2].is_loopback);
  CHECK(h[2].Endpoint() == "[::1]:29502");
  CHECK(h[3].address == "fe80::2");
  CHECK(h[3].port == rt::net::kDefaultPort);
  CHECK(h[4].host == "beta");
  CHECK(h[4].address == "10.0.0.2");
  CHECK(h[4].port == 7000);
  CHECK_FALSE(rt::net::AllLoopback(h));
}

TEST_CASE("hosts file: real resolver handles localhost and numeric addresses") {
  auto hosts = ParseHostsText("localhost:30001\n127.0.0.1:30002\n", "hosts");
  REQUIRE(hosts.ok());
  CHECK((*hosts)[0].is_loopback);
  CHECK((*hosts)[1].address == "127.0.0.1");
  CHECK(rt::net::AllLoopback(*hosts));
}

TEST_CASE("hosts file: errors name file and line") {
  struct Case {
    const char* text;
    const char* expect;
  };
  const Case cases[] = {
      {"10.0.0.1\n10.0.0.1:29500\n", "hosts:2"},              // duplicate after default port
      {"alpha\nalpha-alias\n", "same peer"},                  // duplicate after resolution
      {"10.0.0.1\nnosuchhost\n", "hosts:2: cannot resolve"},  // unresolvable
      {"10.0.0.1:0\n", "bad port"},
      {"10.0.0.1:70000\n", "bad port"},
      {"10.0.0.1:12ab\n", "bad port"},
      {"10.0.0.1:\n", "empty port"},
      {"::1\n", "brackets"},
      {"[::1\n", "closing"},
      {"[10.0.0.1]:5\n", "not an IPv6"},
      {"[::1]x\n", "unexpected"},
      {"a b\n", "white space inside"},
      // Two entries on one line: one per line, not "looks like an IPv6 address".
      {"127.0.0.1:31500 127.0.0.1:31501\n",
       "'127.0.0.1:31500 127.0.0.1:31501' has white space inside: one HOST[:PORT] per line"},
      {"[::1]:1 [::1]:2\n", "white space inside"},
      {"# only comments\n\n", "no hosts"},
  };
  for (const auto& c : cases) {
    CAPTURE(c.text);
    auto hosts = ParseHostsText(c.text, "hosts", FakeResolve);
    REQUIRE_FALSE(hosts.ok());
    CHECK(std::string(hosts.status().message()).find(c.expect) != std::string::npos);
  }
  auto dup = ParseHostsText("alpha\nbeta\n10.0.0.1\n", "h.txt", FakeResolve);
  REQUIRE_FALSE(dup.ok());
  CHECK(std::string(dup.status().message()).find("h.txt:3") != std::string::npos);
  CHECK(std::string(dup.status().message()).find("line 1") != std::string::npos);
  // Both lines are quoted as written, so the two spellings of one peer are visible.
  dup = ParseHostsText("10.0.0.1:29500\n10.0.0.1\n", "h.txt", FakeResolve);
  REQUIRE_FALSE(dup.ok());
  CHECK(std::string(dup.status().message()) ==
        "h.txt:2: '10.0.0.1' is the same peer (10.0.0.1:29500) as line 1 ('10.0.0.1:29500'); "
        "each peer needs its own address or port");
}

TEST_CASE("hosts file: load from disk, missing file") {
  std::string path = "/tmp/ringtrain_hosts_test_" + std::to_string(getpid());
  {
    std::ofstream out(path);
    out << "127.0.0.1:30010\n127.0.0.1:30011 # second\n";
  }
  auto hosts = rt::net::LoadHostsFile(path);
  std::remove(path.c_str());
  REQUIRE(hosts.ok());
  CHECK(hosts->size() == 2);
  auto missing = rt::net::LoadHostsFile(path);
  CHECK_FALSE(missing.ok());
  CHECK(std::string(missing.status().message()).find(path) != std::string::npos);
}
