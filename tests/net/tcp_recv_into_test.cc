// TcpRing::RecvFromPrevInto: messages read straight into the caller's buffer (when the
// caller waits first, or posted the destination in advance with PostRecvsInto) or
// copied from the queue (when they arrived first), in order with RecvFromPrev; wrong
// sizes, timeouts, withdrawn destinations and a dying peer are errors, never hangs.
#include <doctest/doctest.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "core/clock.h"
#include "net/tcp_ring.h"
#include "net_test_util.h"

namespace {

using rt::net::TcpRing;
using rt::net::TcpRingOptions;
using namespace rt::net::testing;

#ifdef RINGTRAIN_SANITIZED
constexpr size_t kBig = 1 << 20;
#else
constexpr size_t kBig = 4 << 20;
#endif

std::vector<uint8_t> Pattern(size_t n, int seed) {
  std::vector<uint8_t> m(n);
  for (size_t k = 0; k < n; ++k) m[k] = static_cast<uint8_t>(seed * 29 + k * 7 + (k >> 11));
  return m;
}

std::vector<std::unique_ptr<TcpRing>> TwoRings() {
  auto hosts = LoopbackHosts(2);
  auto results = FormRings({RingOptions(hosts, 0), RingOptions(hosts, 1)});
  std::vector<std::unique_ptr<TcpRing>> rings;
  for (auto& r : results) {
    INFO(r.status().ToString());
    REQUIRE(r.ok());
    rings.push_back(*std::move(r));
  }
  return rings;
}

TEST_CASE("tcp ring: RecvFromPrevInto delivers posted-first and queued-first messages in order") {
  auto rings = TwoRings();
  TcpRing& sender = *rings[0];
  TcpRing& receiver = *rings[1];
  const std::vector<size_t> sizes = {kBig, 0, 1, 65537, kBig / 3 + 5, kBig, 48};
  std::vector<std::vector<uint8_t>> out;
  for (size_t i = 0; i < sizes.size(); ++i) out.push_back(Pattern(sizes[i], static_cast<int>(i)));

  // Posted first: the receiver waits before each message is sent (read in place).
  std::thread slow_sender([&] {
    for (const auto& m : out) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      CHECK(sender.SendToNext(m).ok());
    }
    CHECK(sender.WaitSendsDone(absl::Seconds(30)).ok());
  });
  std::vector<uint8_t> scratch;
  for (size_t i = 0; i < sizes.size(); ++i) {
    CAPTURE(i);
    std::vector<uint8_t> in(sizes[i], 0xee);
    absl::Status st = receiver.RecvFromPrevInto(absl::MakeSpan(in), &scratch, absl::Seconds(30));
    INFO(st.ToString());
    REQUIRE(st.ok());
    CHECK(in == out[i]);
  }
  slow_sender.join();

  // Queued first: everything has arrived before the receiver asks (copied), mixed
  // with RecvFromPrev, and the order holds.
  for (const auto& m : out) REQUIRE(sender.SendToNext(m).ok());
  REQUIRE(sender.WaitSendsDone(absl::Seconds(30)).ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  for (size_t i = 0; i < sizes.size(); ++i) {
    CAPTURE(i);
    if (i % 2 == 0) {
      std::vector<uint8_t> in(sizes[i], 0xee);
      REQUIRE(receiver.RecvFromPrevInto(absl::MakeSpan(in), &scratch, absl::Seconds(30)).ok());
      CHECK(in == out[i]);
    } else {
      std::vector<uint8_t> in;
      REQUIRE(receiver.RecvFromPrev(&in, absl::Seconds(30)).ok());
      CHECK(in == out[i]);
    }
  }
}

TEST_CASE("tcp ring: RecvFromPrevInto refuses a message of another size and goes on") {
  auto rings = TwoRings();
  std::vector<uint8_t> scratch;
  const auto first = Pattern(1000, 1), second = Pattern(kBig, 2);
  for (bool posted_first : {true, false}) {
    CAPTURE(posted_first);
    std::thread sender([&] {
      if (posted_first) std::this_thread::sleep_for(std::chrono::milliseconds(50));
      CHECK(rings[0]->SendToNext(first).ok());
      CHECK(rings[0]->SendToNext(second).ok());
      CHECK(rings[0]->WaitSendsDone(absl::Seconds(30)).ok());
    });
    if (!posted_first) sender.join();
    std::vector<uint8_t> wrong(999);
    absl::Status st =
        rings[1]->RecvFromPrevInto(absl::MakeSpan(wrong), &scratch, absl::Seconds(30));
    CHECK(st.code() == absl::StatusCode::kDataLoss);
    CHECK(StatusText(st).find("999") != std::string::npos);
    CHECK(StatusText(st).find("1000") != std::string::npos);
    // The wrong-size message was consumed; the next one arrives intact.
    std::vector<uint8_t> in(kBig);
    REQUIRE(rings[1]->RecvFromPrevInto(absl::MakeSpan(in), &scratch, absl::Seconds(30)).ok());
    CHECK(in == second);
    if (posted_first) sender.join();
  }
}

TEST_CASE("tcp ring: RecvFromPrevInto times out cleanly and fails when the peer dies") {
  auto rings = TwoRings();
  std::vector<uint8_t> scratch, in(64);
  absl::Status st =
      rings[1]->RecvFromPrevInto(absl::MakeSpan(in), &scratch, absl::Milliseconds(100));
  CHECK(st.code() == absl::StatusCode::kDeadlineExceeded);
  // Nothing was half-read: the link still works.
  const auto m = Pattern(64, 3);
  REQUIRE(rings[0]->SendToNext(m).ok());
  REQUIRE(rings[1]->RecvFromPrevInto(absl::MakeSpan(in), &scratch, absl::Seconds(30)).ok());
  CHECK(in == m);
  // The predecessor goes away while we wait: an error, not a hang.
  std::thread killer([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    rings[0].reset();
  });
  auto start = std::chrono::steady_clock::now();
  st = rings[1]->RecvFromPrevInto(absl::MakeSpan(in), &scratch, absl::Seconds(30));
  killer.join();
  CHECK(!st.ok());
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(10));
}

uint64_t InPlace(TcpRing& ring) { return ring.prev_link()->connection().messages_read_in_place(); }

TEST_CASE("tcp ring: posted destinations are filled in place even behind queued messages") {
  auto rings = TwoRings();
  TcpRing& sender = *rings[0];
  TcpRing& receiver = *rings[1];
  // Two ordinary messages first, then four whose destinations are posted in advance
  // (skip = 2), one of them empty.
  const auto first = Pattern(kBig, 1), second = Pattern(300, 2);
  std::vector<std::vector<uint8_t>> posted_out = {Pattern(kBig, 3), Pattern(0, 4),
                                                  Pattern(65537, 5), Pattern(kBig / 2 + 3, 6)};
  std::vector<std::vector<uint8_t>> in;
  std::vector<absl::Span<uint8_t>> dsts;
  for (const auto& m : posted_out) in.emplace_back(m.size(), 0xee);
  for (auto& v : in) dsts.push_back(absl::MakeSpan(v));
  const uint64_t in_place_before = InPlace(receiver);
  REQUIRE(receiver.PostRecvsInto(2, dsts).ok());
  REQUIRE(sender.SendToNext(first).ok());
  REQUIRE(sender.SendToNext(second).ok());
  for (const auto& m : posted_out) REQUIRE(sender.SendToNext(m).ok());
  REQUIRE(sender.WaitSendsDone(absl::Seconds(30)).ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(100));  // all of it has arrived

  std::vector<uint8_t> got, scratch;
  // A posted message is not taken by RecvFromPrev, and a destination must match.
  REQUIRE(receiver.RecvFromPrev(&got, absl::Seconds(30)).ok());
  CHECK(got == first);
  REQUIRE(receiver.RecvFromPrev(&got, absl::Seconds(30)).ok());
  CHECK(got == second);
  CHECK(receiver.RecvFromPrev(&got, absl::Seconds(1)).code() ==
        absl::StatusCode::kFailedPrecondition);
  std::vector<uint8_t> other(kBig);
  CHECK(receiver.RecvFromPrevInto(absl::MakeSpan(other), &scratch, absl::Seconds(1)).code() ==
        absl::StatusCode::kInvalidArgument);
  for (size_t i = 0; i < in.size(); ++i) {
    CAPTURE(i);
    REQUIRE(receiver.RecvFromPrevInto(dsts[i], &scratch, absl::Seconds(30)).ok());
    CHECK(in[i] == posted_out[i]);
  }
  CHECK(InPlace(receiver) - in_place_before == posted_out.size());

  // A second announcement continues where the first ended (skip counts the
  // messages still announced); an overlap or a gap is refused.
  std::vector<uint8_t> a(1000), b(2000);
  std::vector<absl::Span<uint8_t>> one = {absl::MakeSpan(a)}, two = {absl::MakeSpan(b)};
  REQUIRE(receiver.PostRecvsInto(0, one).ok());
  CHECK(receiver.PostRecvsInto(0, two).code() == absl::StatusCode::kFailedPrecondition);
  CHECK(receiver.PostRecvsInto(2, two).code() == absl::StatusCode::kFailedPrecondition);
  REQUIRE(receiver.PostRecvsInto(1, two).ok());
  const auto ma = Pattern(1000, 7), mb = Pattern(2000, 8);
  REQUIRE(sender.SendToNext(ma).ok());
  REQUIRE(sender.SendToNext(mb).ok());
  REQUIRE(receiver.RecvFromPrevInto(absl::MakeSpan(a), &scratch, absl::Seconds(30)).ok());
  REQUIRE(receiver.RecvFromPrevInto(absl::MakeSpan(b), &scratch, absl::Seconds(30)).ok());
  CHECK(a == ma);
  CHECK(b == mb);
  REQUIRE(sender.WaitSendsDone(absl::Seconds(30)).ok());
}

TEST_CASE("tcp ring: posting after the message arrived copies it -- another size is refused") {
  auto rings = TwoRings();
  const auto early = Pattern(4000, 1), wrong = Pattern(500, 2), next = Pattern(kBig, 3);
  REQUIRE(rings[0]->SendToNext(early).ok());
  REQUIRE(rings[0]->WaitSendsDone(absl::Seconds(30)).ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  std::vector<uint8_t> a(4000), b(499), c(kBig), scratch;
  std::vector<absl::Span<uint8_t>> dsts = {absl::MakeSpan(a), absl::MakeSpan(b), absl::MakeSpan(c)};
  REQUIRE(rings[1]->PostRecvsInto(0, dsts).ok());
  REQUIRE(rings[0]->SendToNext(wrong).ok());
  REQUIRE(rings[0]->SendToNext(next).ok());
  REQUIRE(rings[1]->RecvFromPrevInto(dsts[0], &scratch, absl::Seconds(30)).ok());
  CHECK(a == early);
  absl::Status st = rings[1]->RecvFromPrevInto(dsts[1], &scratch, absl::Seconds(30));
  CHECK(st.code() == absl::StatusCode::kDataLoss);
  CHECK(StatusText(st).find("499") != std::string::npos);
  CHECK(StatusText(st).find("500") != std::string::npos);
  REQUIRE(rings[1]->RecvFromPrevInto(dsts[2], &scratch, absl::Seconds(30)).ok());
  CHECK(c == next);
  REQUIRE(rings[0]->WaitSendsDone(absl::Seconds(30)).ok());
}

TEST_CASE(
    "tcp ring: withdrawn destinations are never written -- one already filled fails the link") {
  auto rings = TwoRings();
  std::vector<uint8_t> scratch;
  {
    // Nothing arrived yet: withdrawing leaves the link usable, the message is queued.
    std::vector<uint8_t> dst(3000, 0xee);
    std::vector<absl::Span<uint8_t>> dsts = {absl::MakeSpan(dst)};
    REQUIRE(rings[1]->PostRecvsInto(0, dsts).ok());
    CHECK(rings[1]->RecvFromPrevInto(dsts[0], &scratch, absl::Milliseconds(50)).code() ==
          absl::StatusCode::kDeadlineExceeded);
    rings[1]->CancelRecvsInto();
    const auto m = Pattern(3000, 1);
    REQUIRE(rings[0]->SendToNext(m).ok());
    // The send does not copy `m`: it must outlive the write, which can still be in
    // sendmsg after the receiver has the bytes (TSan saw the block free it there).
    REQUIRE(rings[0]->WaitSendsDone(absl::Seconds(30)).ok());
    std::vector<uint8_t> got;
    REQUIRE(rings[1]->RecvFromPrev(&got, absl::Seconds(30)).ok());
    CHECK(got == m);
    CHECK(dst == std::vector<uint8_t>(3000, 0xee));
  }
  {
    // Filled in place but never received: the stream and the buffers disagree now,
    // so the link fails with an error instead of losing the message silently.
    std::vector<uint8_t> dst(kBig);
    std::vector<absl::Span<uint8_t>> dsts = {absl::MakeSpan(dst)};
    REQUIRE(rings[1]->PostRecvsInto(0, dsts).ok());
    const auto m = Pattern(kBig, 2);
    REQUIRE(rings[0]->SendToNext(m).ok());
    REQUIRE(rings[0]->WaitSendsDone(absl::Seconds(30)).ok());
    rt::Stopwatch watch;
    while (InPlace(*rings[1]) == 0 && watch.ElapsedSeconds() < 20) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    rings[1]->CancelRecvsInto();
    std::vector<uint8_t> got;
    absl::Status st = rings[1]->RecvFromPrev(&got, absl::Seconds(10));
    INFO(st.ToString());
    CHECK(st.code() == absl::StatusCode::kAborted);
    CHECK(StatusText(st).find("abandoned") != std::string::npos);
  }
}

}  // namespace

TEST_CASE("tcp ring: RecvFromPrevIntoAll takes announced messages in place, in order") {
  auto rings = TwoRings();
  TcpRing& sender = *rings[0];
  TcpRing& receiver = *rings[1];
  // One unannounced message first (queued), then 12 announced ones of several sizes,
  // some sent before and some after the receiver starts waiting.
  const std::vector<size_t> sizes = {kBig / 4, 1,    0, 65537,  kBig,    48, kBig / 3 + 5,
                                     7,        kBig, 3, 100000, 1 << 16, 5};
  std::vector<std::vector<uint8_t>> out;
  for (size_t i = 0; i < sizes.size(); ++i) out.push_back(Pattern(sizes[i], static_cast<int>(i)));
  std::vector<std::vector<uint8_t>> in;
  std::vector<absl::Span<uint8_t>> dsts;
  for (size_t i = 1; i < sizes.size(); ++i) in.emplace_back(sizes[i], 0xee);
  for (auto& b : in) dsts.push_back(absl::MakeSpan(b));
  REQUIRE(receiver.PostRecvsInto(/*skip=*/1, dsts).ok());
  for (size_t i = 0; i < 6; ++i) REQUIRE(sender.SendToNext(out[i]).ok());
  std::thread late([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    for (size_t i = 6; i < out.size(); ++i) CHECK(sender.SendToNext(out[i]).ok());
    CHECK(sender.WaitSendsDone(absl::Seconds(30)).ok());
  });
  std::vector<uint8_t> first;
  REQUIRE(receiver.RecvFromPrev(&first, absl::Seconds(30)).ok());
  CHECK(first == out[0]);
  std::vector<uint8_t> scratch;
  absl::Status st = receiver.RecvFromPrevIntoAll(dsts, &scratch, absl::Seconds(30));
  late.join();
  INFO(st.ToString());
  REQUIRE(st.ok());
  for (size_t i = 1; i < out.size(); ++i) CHECK(in[i - 1] == out[i]);
}

TEST_CASE("tcp ring: RecvFromPrevIntoAll times out, and names a message of another size") {
  auto rings = TwoRings();
  TcpRing& sender = *rings[0];
  TcpRing& receiver = *rings[1];
  std::vector<uint8_t> a(1000), b(2000);
  std::vector<absl::Span<uint8_t>> dsts = {absl::MakeSpan(a), absl::MakeSpan(b)};
  std::vector<uint8_t> scratch;
  SUBCASE("the second message never comes") {
    REQUIRE(receiver.PostRecvsInto(0, dsts).ok());
    auto one = Pattern(1000, 1);
    REQUIRE(sender.SendToNext(one).ok());
    REQUIRE(sender.WaitSendsDone(absl::Seconds(10)).ok());  // `one` may go away after
    rt::Stopwatch watch;
    absl::Status st = receiver.RecvFromPrevIntoAll(dsts, &scratch, absl::Milliseconds(300));
    CHECK(absl::IsDeadlineExceeded(st));
    CHECK(watch.ElapsedSeconds() < 5);
    CHECK(a == one);
    receiver.CancelRecvsInto();  // b is no longer a destination
  }
  SUBCASE("the second message has another size") {
    auto one = Pattern(1000, 1), three = Pattern(3000, 3);
    REQUIRE(sender.SendToNext(one).ok());
    REQUIRE(sender.SendToNext(three).ok());
    REQUIRE(sender.WaitSendsDone(absl::Seconds(10)).ok());
    absl::Status st = receiver.RecvFromPrevIntoAll(dsts, &scratch, absl::Seconds(10));
    INFO(st.ToString());
    CHECK(st.code() == absl::StatusCode::kDataLoss);
    CHECK(StatusText(st).find("3000") != std::string::npos);
    CHECK(a == one);
  }
}
