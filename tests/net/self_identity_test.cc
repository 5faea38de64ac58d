// Self identity: --self, --rank, PSSH_NODENUM, local interface, and each error.
#include "net/self_identity.h"

#include <doctest/doctest.h>

#include <string>

namespace {

std::vector<rt::net::HostEntry> Hosts() {
  auto h = rt::net::ParseHostsText("10.0.0.1\n10.0.0.2:29501\n127.0.0.1:29600\n127.0.0.1:29601\n",
                                   "hosts");
  REQUIRE(h.ok());
  return *h;
}

bool Contains(const absl::Status& s, const std::string& text) {
  return std::string(s.message()).find(text) != std::string::npos;
}

}  // namespace

TEST_CASE("identity: rules in order") {
  auto hosts = Hosts();
  rt::net::IdentityInputs in;
  in.self = "10.0.0.2:29501";
  in.rank = 0;
  in.pssh_nodenum = "3";
  in.local_addresses = {"10.0.0.1"};
  auto id = rt::net::ResolveSelfIdentity(hosts, in);
  REQUIRE(id.ok());
  CHECK(id->rank == 1);
  CHECK(id->how == "--self");

  in.self = "";
  id = rt::net::ResolveSelfIdentity(hosts, in);
  REQUIRE(id.ok());
  CHECK(id->rank == 0);
  CHECK(id->how == "--rank");

  in.rank = -1;
  id = rt::net::ResolveSelfIdentity(hosts, in);
  REQUIRE(id.ok());
  CHECK(id->rank == 3);
  CHECK(id->how == "PSSH_NODENUM");

  in.pssh_nodenum.reset();
  id = rt::net::ResolveSelfIdentity(hosts, in);
  REQUIRE(id.ok());
  CHECK(id->rank == 0);
  CHECK(id->how == "local interface");

  in.local_addresses = {"192.168.1.9", "10.0.0.2"};
  id = rt::net::ResolveSelfIdentity(hosts, in);
  REQUIRE(id.ok());
  CHECK(id->rank == 1);
}

TEST_CASE("identity: --self uses the default port and matches port too") {
  auto hosts = Hosts();
  rt::net::IdentityInputs in;
  in.self = "10.0.0.1";
  auto id = rt::net::ResolveSelfIdentity(hosts, in);
  REQUIRE(id.ok());
  CHECK(id->rank == 0);
  in.self = "127.0.0.1:29601";
  id = rt::net::ResolveSelfIdentity(hosts, in);
  REQUIRE(id.ok());
  CHECK(id->rank == 3);
}

TEST_CASE("identity: errors") {
  auto hosts = Hosts();
  rt::net::IdentityInputs in;
  in.self = "10.0.0.2:29999";
  auto id = rt::net::ResolveSelfIdentity(hosts, in);
  REQUIRE_FALSE(id.ok());
  CHECK(Contains(id.status(), "not in the hosts file"));

  in.self = "10.0.0.2:bad";
  id = rt::net::ResolveSelfIdentity(hosts, in);
  REQUIRE_FALSE(id.ok());
  CHECK(Contains(id.status(), "--self"));

  in.self = "";
  in.rank = 4;
  id = rt::net::ResolveSelfIdentity(hosts, in);
  REQUIRE_FALSE(id.ok());
  CHECK(Contains(id.status(), "--rank gives rank 4"));
  CHECK(Contains(id.status(), "ranks 0..3"));

  in.rank = -1;
  in.pssh_nodenum = "7";
  id = rt::net::ResolveSelfIdentity(hosts, in);
  REQUIRE_FALSE(id.ok());
  CHECK(Contains(id.status(), "PSSH_NODENUM"));
  in.pssh_nodenum = "x1";
  id = rt::net::ResolveSelfIdentity(hosts, in);
  REQUIRE_FALSE(id.ok());
  CHECK(Contains(id.status(), "not a number"));

  in.pssh_nodenum.reset();
  in.local_addresses = {"192.168.7.7"};
  id = rt::net::ResolveSelfIdentity(hosts, in);
  REQUIRE_FALSE(id.ok());
  CHECK(Contains(id.status(), "no entry's address is on a local interface"));
  CHECK(Contains(id.status(), "--self"));

  // A loopback ring: two entries on this machine is ambiguous.
  in.local_addresses = {"127.0.0.1"};
  id = rt::net::ResolveSelfIdentity(hosts, in);
  REQUIRE_FALSE(id.ok());
  CHECK(Contains(id.status(), "2 entries"));
  CHECK(Contains(id.status(), "--rank"));
}

TEST_CASE("identity: local interfaces include loopback") {
  auto local = rt::net::LocalInterfaceAddresses();
  REQUIRE(local.ok());
  bool has_loopback = false;
  for (const auto& a : *local) has_loopback = has_loopback || a == "127.0.0.1";
  CHECK(has_loopback);
  auto in = rt::net::IdentityInputsFromEnvironment("", 2);
  REQUIRE(in.ok());
  CHECK(in->rank == 2);
}
