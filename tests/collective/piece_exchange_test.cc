// The piece exchange on in-process rings: every needed float arrives with the
// holder's value, nothing else is written, lost parts agree everywhere, bad input and
// failing peers end in errors instead of hangs.
#include "collective/piece_exchange.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <memory>
#include <random>
#include <string>
#include <thread>

#include "absl/time/clock.h"
#include "collective/bucketed_reducer.h"
#include "collective/ring_allreduce.h"
#include "collective/ring_test_util.h"
#include "collective/small_collectives.h"
#include "net/inproc_ring_transport.h"

namespace rt::collective {
namespace {

using testing::RunOnRing;

constexpr float kNotHeld = -1.0f;    // what a member's source has outside its held ranges
constexpr float kUnwritten = -7.0f;  // what a member's destination has before the exchange

// The true value of float i of buffer b (exact in fp32 for the sizes used here).
float Value(int b, size_t i) { return static_cast<float>(1 + b * 100000 + i); }

struct Member {
  std::vector<FloatRange> held, needed;
};

struct Outcome {
  absl::Status status;
  PieceExchangeResult result;
  std::vector<std::vector<float>> out;  // per buffer: what `write` stored
  std::vector<std::vector<int>> times;  // per buffer and float: writes of it
  int bad_reads = 0, bad_writes = 0;    // calls outside one held / needed range
};

bool InsideOne(const std::vector<FloatRange>& ranges, size_t begin, size_t end) {
  for (const FloatRange& r : ranges) {
    if (r.first <= begin && end <= r.second) return begin < end;
  }
  return false;
}

bool Covered(const std::vector<FloatRange>& ranges, size_t i) {
  for (const FloatRange& r : ranges) {
    if (r.first <= i && i < r.second) return true;
  }
  return false;
}

// The exchange of one member: its source holds the true values in its held ranges.
absl::Status RunMember(net::RingTransport* t, const Member& m, size_t length, int buffers,
                       const PieceExchangeOptions& options, Outcome* o) {
  std::vector<std::vector<float>> source(buffers, std::vector<float>(length, kNotHeld));
  for (int b = 0; b < buffers; ++b) {
    for (const FloatRange& r : m.held) {
      for (size_t i = r.first; i < r.second; ++i) source[b][i] = Value(b, i);
    }
  }
  o->out.assign(buffers, std::vector<float>(length, kUnwritten));
  o->times.assign(buffers, std::vector<int>(length, 0));
  auto read = [&](int b, FloatRange r) -> absl::Span<const float> {
    if (b < 0 || b >= buffers || !InsideOne(m.held, r.first, r.second)) {
      ++o->bad_reads;
      return {};
    }
    return absl::MakeConstSpan(source[b]).subspan(r.first, r.second - r.first);
  };
  auto write = [&](int b, size_t offset, absl::Span<const float> floats) {
    if (b < 0 || b >= buffers || !InsideOne(m.needed, offset, offset + floats.size())) {
      ++o->bad_writes;
      return;
    }
    for (size_t k = 0; k < floats.size(); ++k) {
      o->out[b][offset + k] = floats[k];
      ++o->times[b][offset + k];
    }
  };
  absl::StatusOr<PieceExchangeResult> r =
      ExchangePieces(t, length, buffers, m.held, m.needed, read, write, options);
  if (!r.ok()) return r.status();
  o->result = *r;
  return absl::OkStatus();
}

std::vector<Outcome> Exchange(const std::vector<Member>& members, size_t length, int buffers,
                              const PieceExchangeOptions& options = {}, bool zero_copy = false) {
  const int n = static_cast<int>(members.size());
  std::vector<Outcome> outcomes(n);
  std::vector<absl::Status> status = RunOnRing(
      n,
      [&](net::RingTransport* t) {
        return RunMember(t, members[t->rank()], length, buffers, options, &outcomes[t->rank()]);
      },
      zero_copy);
  for (int p = 0; p < n; ++p) outcomes[p].status = status[p];
  return outcomes;
}

// Brute force, float by float: needed by someone and held by nobody.
std::vector<FloatRange> ExpectedLost(const std::vector<Member>& members, size_t length) {
  std::vector<FloatRange> lost;
  for (size_t i = 0; i < length; ++i) {
    bool needed = false, held = false;
    for (const Member& m : members) {
      needed = needed || Covered(m.needed, i);
      held = held || Covered(m.held, i);
    }
    if (!needed || held) continue;
    if (!lost.empty() && lost.back().second == i) {
      ++lost.back().second;
    } else {
      lost.emplace_back(i, i + 1);
    }
  }
  return lost;
}

// Every member: exactly the true values, once, in its needed floats that are not lost;
// nothing anywhere else; the same `lost` as the brute force.
void CheckDelivered(const std::vector<Outcome>& outcomes, const std::vector<Member>& members,
                    size_t length, int buffers) {
  const std::vector<FloatRange> lost = ExpectedLost(members, length);
  for (size_t p = 0; p < members.size(); ++p) {
    CAPTURE(p);
    const Outcome& o = outcomes[p];
    REQUIRE(o.status.ok());
    CHECK(o.bad_reads == 0);
    CHECK(o.bad_writes == 0);
    CHECK(o.result.lost == lost);
    uint64_t want_written = 0, wrong = 0;
    for (int b = 0; b < buffers; ++b) {
      for (size_t i = 0; i < length; ++i) {
        const bool gets = Covered(members[p].needed, i) && !Covered(lost, i);
        want_written += gets ? 1 : 0;
        const bool right = gets ? (o.out[b][i] == Value(b, i) && o.times[b][i] == 1)
                                : (o.out[b][i] == kUnwritten && o.times[b][i] == 0);
        wrong += right ? 0 : 1;
      }
    }
    CHECK(wrong == 0);
    CHECK(o.result.floats_written == want_written);
  }
}

// ZeRO-like pieces, cut as train/zero_pieces does (buckets from the end of the buffer,
// each split into ring segments): the ranges ring position `position` owns.
std::vector<FloatRange> Owned(size_t length, size_t bucket_bytes, int peers, int position) {
  std::vector<FloatRange> ranges;
  for (const BucketedReducer::Bucket& k : BucketedReducer::Cut(length, bucket_bytes)) {
    const auto [b, e] = OwnedRange(k.end - k.begin, peers, position);
    if (b < e) ranges.emplace_back(k.begin + b, k.begin + e);
  }
  std::sort(ranges.begin(), ranges.end());
  return ranges;
}

// Owned plus the replica of the predecessor's pieces (adjacent ranges kept apart, so
// reads and writes must split at them).
std::vector<FloatRange> OwnedAndReplica(size_t length, size_t bucket_bytes, int peers,
                                        int position) {
  std::vector<FloatRange> ranges = Owned(length, bucket_bytes, peers, position);
  if (peers > 1) {
    for (const FloatRange& r : Owned(length, bucket_bytes, peers, (position + peers - 1) % peers)) {
      ranges.push_back(r);
    }
  }
  std::sort(ranges.begin(), ranges.end());
  return ranges;
}

// A ring change: new position q is old member new_order[q] (-1: a joiner, holds
// nothing); old members not listed are gone. Each holds its old pieces and replica
// and needs its new ones.
std::vector<Member> RingChange(size_t length, size_t bucket_bytes, int old_peers,
                               const std::vector<int>& new_order) {
  const int new_peers = static_cast<int>(new_order.size());
  std::vector<Member> members(new_peers);
  for (int q = 0; q < new_peers; ++q) {
    if (new_order[q] >= 0) {
      members[q].held = OwnedAndReplica(length, bucket_bytes, old_peers, new_order[q]);
    }
    members[q].needed = OwnedAndReplica(length, bucket_bytes, new_peers, q);
  }
  return members;
}

uint64_t TotalBytesSent(const std::vector<Outcome>& outcomes) {
  uint64_t total = 0;
  for (const Outcome& o : outcomes) total += o.result.bytes_sent;
  return total;
}

TEST_CASE("piece exchange: an old ring of 4 owners and replicas fills a new ring of 3") {
  const size_t length = 1000, bucket_bytes = 4 * 300;  // buckets of 300, 300, 300, 100
  for (bool zero_copy : {false, true}) {
    CAPTURE(zero_copy);
    // Old position 2 died; the others keep their order.
    const std::vector<Member> members = RingChange(length, bucket_bytes, 4, {0, 1, 3});
    PieceExchangeOptions o;
    o.chunk_floats = 64;
    const std::vector<Outcome> out = Exchange(members, length, 2, o, zero_copy);
    CheckDelivered(out, members, length, 2);
    CHECK(out[0].result.lost.empty());  // position 2's pieces live on at position 3
    CHECK(TotalBytesSent(out) > 0);
  }
}

TEST_CASE("piece exchange: a ring of 4 with a joiner that holds nothing") {
  const size_t length = 777, bucket_bytes = 4 * 250;
  // Old position 3 died; a new peer joined between old 0 and old 1.
  const std::vector<Member> members = RingChange(length, bucket_bytes, 4, {0, -1, 1, 2});
  const std::vector<Outcome> out = Exchange(members, length, 2);
  CheckDelivered(out, members, length, 2);
  // All it writes comes from the ring (and it forwards what its successors lack).
  CHECK(out[1].result.floats_written > 0);
  CHECK(out[1].result.floats_received >= out[1].result.floats_written);
}

TEST_CASE("piece exchange: a checkpoint writer gathers everything, the others keep theirs") {
  const size_t length = 1234, bucket_bytes = 4 * 400;
  for (int writer : {0, 2}) {
    CAPTURE(writer);
    std::vector<Member> members = RingChange(length, bucket_bytes, 3, {0, 1, 2});
    members[writer].needed = {{0, length}};
    PieceExchangeOptions o;
    o.chunk_floats = 100;
    const std::vector<Outcome> out = Exchange(members, length, 2, o, /*zero_copy=*/true);
    CheckDelivered(out, members, length, 2);
    // It lacks its successor's pieces, whose replica its predecessor keeps: they
    // come one hop, once, and nobody else receives anything.
    size_t lacking = 0;
    for (const FloatRange& r : Owned(length, bucket_bytes, 3, (writer + 1) % 3)) {
      lacking += r.second - r.first;
    }
    CHECK(out[writer].result.floats_received == 2 * lacking);
    CHECK(TotalBytesSent(out) == 2 * lacking * sizeof(float));
  }
}

TEST_CASE("piece exchange: nothing travels when everyone holds everything") {
  const size_t length = 500;
  std::vector<Member> members(4);
  for (int p = 0; p < 4; ++p) {
    members[p].held = {{0, 100}, {100, 500}};
    members[p].needed = OwnedAndReplica(length, 4 * 128, 4, p);
  }
  members[3].needed = {{0, length}};
  const std::vector<Outcome> out = Exchange(members, length, 3);
  CheckDelivered(out, members, length, 3);
  for (const Outcome& o : out) {
    CHECK(o.result.bytes_sent == 0);
    CHECK(o.result.floats_received == 0);
    CHECK(o.result.descriptor_bytes_sent > 0);
  }
}

TEST_CASE("piece exchange: the pieces of two lost ring neighbours are lost on every peer") {
  const size_t length = 900, bucket_bytes = 4 * 300;
  // Old positions 1 and 2 died together: 1's pieces had their replica at 2.
  const std::vector<Member> members = RingChange(length, bucket_bytes, 4, {0, 3});
  const std::vector<Outcome> out = Exchange(members, length, 2);
  CheckDelivered(out, members, length, 2);
  std::vector<FloatRange> want;  // old position 1's pieces, merged
  for (const FloatRange& r : Owned(length, bucket_bytes, 4, 1)) {
    if (!want.empty() && want.back().second == r.first) {
      want.back().second = r.second;
    } else {
      want.push_back(r);
    }
  }
  REQUIRE(!want.empty());
  CHECK(out[0].result.lost == want);
  CHECK(out[1].result.lost == want);
}

TEST_CASE("piece exchange: a ring of 1 copies what it holds and reports the rest lost") {
  const size_t length = 100;
  const std::vector<Member> members = {{{{0, 10}, {10, 40}, {70, 90}}, {{5, 50}, {60, 100}}}};
  const std::vector<Outcome> out = Exchange(members, length, 2);
  CheckDelivered(out, members, length, 2);
  CHECK(out[0].result.lost == std::vector<FloatRange>{{40, 50}, {60, 70}, {90, 100}});
  CHECK(out[0].result.bytes_sent == 0);
  CHECK(out[0].result.descriptor_bytes_sent == 0);
}

TEST_CASE("piece exchange: chunks of 7 floats over ranges that are not multiples of 7") {
  const size_t length = 1001, bucket_bytes = 4 * 333;
  for (bool zero_copy : {false, true}) {
    CAPTURE(zero_copy);
    const std::vector<Member> members = RingChange(length, bucket_bytes, 3, {2, -1, 0, 1});
    PieceExchangeOptions o;
    o.chunk_floats = 7;
    const std::vector<Outcome> out = Exchange(members, length, 2, o, zero_copy);
    CheckDelivered(out, members, length, 2);
  }
}

TEST_CASE("piece exchange: random holdings and needs on rings of 1 to 5 (fixed seed)") {
  std::mt19937 rng(20240516);
  auto random_ranges = [&rng](size_t length, int percent) {
    std::vector<FloatRange> ranges;
    size_t x = 0;
    while (x < length) {
      const size_t len = 1 + rng() % 40;
      const size_t end = std::min(length, x + len);
      if (static_cast<int>(rng() % 100) < percent) ranges.emplace_back(x, end);
      x = end + (rng() % 3 == 0 ? rng() % 5 : 0);
    }
    return ranges;
  };
  for (int round = 0; round < 24; ++round) {
    const int n = 1 + round % 5;
    const size_t length = 50 + rng() % 400;
    std::vector<Member> members(n);
    for (Member& m : members) {
      m.held = random_ranges(length, 35);
      m.needed = random_ranges(length, 50);
    }
    PieceExchangeOptions o;
    o.chunk_floats = 1 + rng() % 60;
    CAPTURE(round);
    const std::vector<Outcome> out = Exchange(members, length, 1 + round % 3, o, round % 2 == 1);
    CheckDelivered(out, members, length, 1 + round % 3);
  }
}

TEST_CASE("piece exchange: malformed ranges of the caller are refused before any traffic") {
  const std::vector<std::pair<std::vector<FloatRange>, std::vector<FloatRange>>> bad = {
      {{{10, 20}, {0, 5}}, {}},  // held unsorted
      {{{0, 10}, {5, 20}}, {}},  // held overlapping
      {{}, {{90, 101}}},         // needed past the end
      {{}, {{30, 20}}},          // needed reversed
  };
  for (const auto& [held, needed] : bad) {
    auto ring = net::MakeInProcessRing(2);
    auto nothing = [](int, FloatRange) { return absl::Span<const float>(); };
    auto ignore = [](int, size_t, absl::Span<const float>) {};
    absl::StatusOr<PieceExchangeResult> r =
        ExchangePieces(ring[0].get(), 100, 2, held, needed, nothing, ignore);
    CHECK(absl::IsInvalidArgument(r.status()));
    std::vector<uint8_t> message;
    CHECK(absl::IsDeadlineExceeded(ring[1]->RecvFromPrev(&message, absl::Milliseconds(20))));
  }
  auto ring = net::MakeInProcessRing(1);
  auto nothing = [](int, FloatRange) { return absl::Span<const float>(); };
  auto ignore = [](int, size_t, absl::Span<const float>) {};
  CHECK(absl::IsInvalidArgument(
      ExchangePieces(ring[0].get(), 100, 0, {}, {}, nothing, ignore).status()));
  PieceExchangeOptions o;
  o.chunk_floats = 0;
  CHECK(absl::IsInvalidArgument(
      ExchangePieces(ring[0].get(), 100, 1, {}, {}, nothing, ignore, o).status()));
}

TEST_CASE("piece exchange: a peer with another length is named on every peer") {
  std::vector<Member> members(3);
  for (Member& m : members) m.held = m.needed = {{0, 10}};
  std::vector<Outcome> outcomes(3);
  std::vector<absl::Status> status = RunOnRing(3, [&](net::RingTransport* t) {
    const size_t length = t->rank() == 2 ? 101 : 100;
    PieceExchangeOptions o;
    o.timeout = absl::Seconds(10);
    return RunMember(t, members[t->rank()], length, 1, o, &outcomes[t->rank()]);
  });
  for (int p = 0; p < 3; ++p) {
    CAPTURE(p);
    CHECK(absl::IsFailedPrecondition(status[p]));
    const std::string want = p == 2
                                 ? "peer 0 has length 100, peer 2 has 101"
                                 : "peer 2 has length 101, peer " + std::to_string(p) + " has 100";
    CHECK(std::string(status[p].message()).find(want) != std::string::npos);
  }
}

TEST_CASE("piece exchange: a malformed descriptor from a peer is refused, naming it") {
  std::vector<Outcome> outcomes(3);
  std::vector<absl::Status> status = RunOnRing(3, [&](net::RingTransport* t) -> absl::Status {
    if (t->rank() == 1) {  // not ExchangePieces: a peer whose bytes are garbage
      const std::vector<uint8_t> garbage = {'P', 'X', 'D', '1', 0xff, 0xff};
      return AllgatherBytes(t, garbage, absl::Seconds(10)).status();
    }
    Member m;
    m.held = m.needed = {{0, 10}};
    PieceExchangeOptions o;
    o.timeout = absl::Seconds(10);
    return RunMember(t, m, 100, 1, o, &outcomes[t->rank()]);
  });
  for (int p : {0, 2}) {
    CAPTURE(p);
    CHECK(absl::IsDataLoss(status[p]));
    CHECK(std::string(status[p].message()).find("peer 1") != std::string::npos);
  }
}

// A transport that fails for good (closing its links, as a dying process would) at
// its `fail_at`-th send.
class FailingTransport final : public net::RingTransport {
 public:
  FailingTransport(std::unique_ptr<net::RingTransport> inner, int fail_at)
      : inner_(std::move(inner)), rank_(inner_->rank()), size_(inner_->size()), left_(fail_at) {}
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  absl::Status SendToNext(absl::Span<const uint8_t> data) override {
    if (inner_ != nullptr && --left_ == 0) inner_.reset();
    if (inner_ == nullptr) return absl::UnavailableError("injected failure");
    return inner_->SendToNext(data);
  }
  absl::Status WaitSendsDone(absl::Duration timeout) override {
    if (inner_ == nullptr) return absl::UnavailableError("injected failure");
    return inner_->WaitSendsDone(timeout);
  }
  absl::Status RecvFromPrev(std::vector<uint8_t>* message, absl::Duration timeout) override {
    if (inner_ == nullptr) return absl::UnavailableError("injected failure");
    return inner_->RecvFromPrev(message, timeout);
  }

 private:
  std::unique_ptr<net::RingTransport> inner_;
  const int rank_, size_;
  int left_;
};

TEST_CASE("piece exchange: a peer that fails mid-exchange ends it on every peer, no hang") {
  // Peer 0 holds everything and the others need everything: it sends many chunks and
  // dies at its 10th message (descriptors take 3). Every peer closes its links when
  // its exchange fails, as a process giving up the ring does. Copy mode only: a closed
  // in-process sender still delivers its queued messages, which in zero-copy mode
  // would read staging buffers the failed exchange has freed (TCP drops them).
  const int n = 4;
  const size_t length = 600;
  {
    std::vector<std::unique_ptr<net::RingTransport>> ring = net::MakeInProcessRing(n);
    ring[0] = std::make_unique<FailingTransport>(std::move(ring[0]), 10);
    std::vector<Outcome> outcomes(n);
    std::vector<absl::Status> status(n);
    const absl::Time start = absl::Now();
    std::vector<std::thread> threads;
    for (int p = 0; p < n; ++p) {
      threads.emplace_back([&, p] {
        Member m;
        m.held = p == 0 ? std::vector<FloatRange>{{0, length}} : std::vector<FloatRange>{};
        m.needed = {{0, length}};
        PieceExchangeOptions o;
        o.chunk_floats = 10;
        o.timeout = absl::Seconds(30);
        status[p] = RunMember(ring[p].get(), m, length, 2, o, &outcomes[p]);
        if (!status[p].ok()) ring[p].reset();
      });
    }
    for (auto& t : threads) t.join();
    for (int p = 0; p < n; ++p) {  // peer 0's own error, the others' closed links
      CAPTURE(status[p]);
      CHECK(absl::IsUnavailable(status[p]));
    }
    CHECK(std::string(status[0].message()).find("injected failure") != std::string::npos);
    CHECK(absl::Now() - start < absl::Seconds(20));  // ended by closed links, not timeouts
  }
}

}  // namespace
}  // namespace rt::collective
