// TcpRing::RecvFromPrevInto: messages read straight into the caller's buffer (when the
// caller waits first) or copied from the queue (when they arrived first), in order
// with RecvFromPrev; wrong sizes, timeouts and a dying peer are errors, never hangs.
#include <doctest/doctest.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

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

}  // namespace
