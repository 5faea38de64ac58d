// Views, quorum rules and step agreement.
#include <doctest/doctest.h>

#include "cluster/step_agreement.h"
#include "cluster/view.h"

namespace rt::cluster {

TEST_CASE("view: leader, positions, ring neighbours, fingerprint") {
  View v{4, {"a:1", "b:1", "c:1"}};
  CHECK(v.leader() == "a:1");
  CHECK(v.Contains("b:1"));
  CHECK(!v.Contains("d:1"));
  CHECK(v.Position("c:1") == 2);
  CHECK(v.Successor("c:1") == "a:1");
  CHECK(v.Predecessor("a:1") == "c:1");
  CHECK(v.Successor("zz").empty());
  CHECK(v.ToString() == "epoch 4 [a:1 b:1 c:1] leader a:1");
  View w = v;
  CHECK(w.Fingerprint() == v.Fingerprint());
  w.epoch = 5;
  CHECK(w.Fingerprint() != v.Fingerprint());
  w = v;
  w.members = {"a:1", "c:1", "b:1"};
  CHECK(w.Fingerprint() != v.Fingerprint());
  // Length-prefixed: moving a character between names changes the fingerprint.
  CHECK(View{1, {"ab", "c"}}.Fingerprint() != View{1, {"a", "bc"}}.Fingerprint());
  CHECK(View{}.leader().empty());
}

TEST_CASE("quorum: majority of the hosts file, or min_peers") {
  CHECK(QuorumSize(1, 0) == 1);
  CHECK(QuorumSize(2, 0) == 2);
  CHECK(QuorumSize(4, 0) == 3);
  CHECK(QuorumSize(5, 0) == 3);
  CHECK(QuorumSize(5, 2) == 2);
  const std::vector<PeerId> hosts = {"a", "b", "c", "d", "e"};
  std::string reason;
  CHECK(HasQuorum({"a", "b", "c"}, hosts, 0, &reason));
  CHECK(!HasQuorum({"d", "e"}, hosts, 0, &reason));
  CHECK(reason == "no quorum: 2 of 5 hosts reachable, 3 needed (unreachable: a b c)");
  // Peers not in the file do not count.
  CHECK(!HasQuorum({"d", "e", "x", "y"}, hosts, 0, nullptr));
  CHECK(HasQuorum({"d", "e"}, hosts, 2, nullptr));
  // 2 + 2: neither side has a quorum of 4.
  CHECK(!HasQuorum({"a", "b"}, {"a", "b", "c", "d"}, 0, nullptr));
  CHECK(!HasQuorum({"c", "d"}, {"a", "b", "c", "d"}, 0, nullptr));
  CHECK(MinPeersWarning(5, 0).empty());
  CHECK(MinPeersWarning(5, 3).empty());
  CHECK(MinPeersWarning(4, 2).find("partition") != std::string::npos);
  CHECK(MinPeersWarning(3, 4).find("never") != std::string::npos);
}

TEST_CASE("hosts fingerprint and ranks") {
  CHECK(HostsFingerprint({"a", "b"}) == HostsFingerprint({"a", "b"}));
  CHECK(HostsFingerprint({"a", "b"}) != HostsFingerprint({"b", "a"}));
  CHECK(HostsFingerprint({"a", "b"}) != HostsFingerprint({"a", "b", "c"}));
  CHECK(RankOf({"a", "b", "c"}, "c") == 2);
  CHECK(RankOf({"a", "b", "c"}, "x") == -1);
}

TEST_CASE("step agreement: last step everyone completed, newest state and its source") {
  const std::vector<PeerId> m = {"a", "b", "c"};
  SUBCASE("everyone equal: nobody needs state") {
    auto a = AgreeOnResume(m, {{"a", {2, 50}}, {"b", {2, 50}}, {"c", {2, 50}}});
    REQUIRE(a.ok());
    CHECK(a->resume == StateVersion{2, 50});
    CHECK(a->source == "a");
    CHECK(a->min_step == 50);
    CHECK(a->need_state.empty());
  }
  SUBCASE("interrupted step: some completed it, the rest receive it") {
    auto a = AgreeOnResume(m, {{"a", {2, 50}}, {"b", {2, 51}}, {"c", {2, 51}}});
    REQUIRE(a.ok());
    CHECK(a->resume == StateVersion{2, 51});
    CHECK(a->source == "b");  // lowest rank holding it
    CHECK(a->min_step == 50);
    CHECK(a->need_state == std::vector<PeerId>{"a"});
  }
  SUBCASE("a later epoch's state wins over a higher step of an older epoch") {
    auto a = AgreeOnResume(m, {{"a", {2, 60}}, {"b", {3, 55}}, {"c", {-1 + 1, -1}}});
    REQUIRE(a.ok());
    CHECK(a->resume == StateVersion{3, 55});
    CHECK(a->source == "b");
    CHECK(a->min_step == -1);
    CHECK(a->need_state == std::vector<PeerId>{"a", "c"});
  }
  SUBCASE("errors") {
    CHECK(!AgreeOnResume(m, {{"a", {1, 1}}, {"b", {1, 1}}}).ok());
    CHECK(absl::IsFailedPrecondition(
        AgreeOnResume(m, {{"a", {0, -1}}, {"b", {0, -1}}, {"c", {0, -1}}}).status()));
    CHECK(!AgreeOnResume({}, {}).ok());
  }
  CHECK(StateVersion{1, 100} < StateVersion{2, 0});
  CHECK(StateVersion{0, -1}.ToString() == "no state");
  CHECK(StateVersion{4, 120}.ToString() == "step 120 (epoch 4)");
}

}  // namespace rt::cluster
