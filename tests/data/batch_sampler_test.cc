// BatchSampler: deterministic windows in range, seeds and steps differ, N peers
// together cover exactly the windows of one peer, windows read as (tokens, targets).
#include "data/batch_sampler.h"

#include <doctest/doctest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <set>
#include <string>
#include <vector>

using rt::data::BatchSampler;

TEST_CASE("BatchSampler windows are deterministic, in range and well spread") {
  const uint64_t num_tokens = 1000;
  const int T = 16;
  auto a = BatchSampler::Create(42, 8, T, num_tokens);
  auto b = BatchSampler::Create(42, 8, T, num_tokens);
  auto c = BatchSampler::Create(43, 8, T, num_tokens);
  REQUIRE(a.ok());
  REQUIRE(b.ok());
  REQUIRE(c.ok());
  int same_as_other_seed = 0;
  std::set<uint64_t> distinct;
  uint64_t lo = num_tokens, hi = 0;
  for (int64_t step = 0; step < 200; ++step) {
    for (int s = 0; s < 8; ++s) {
      uint64_t w = a->WindowStart(step, s);
      CHECK(w == b->WindowStart(step, s));
      CHECK(w <= num_tokens - T - 1);
      same_as_other_seed += w == c->WindowStart(step, s);
      distinct.insert(w);
      lo = std::min(lo, w);
      hi = std::max(hi, w);
    }
  }
  CHECK(same_as_other_seed < 20);  // 1600 draws over 984 starts: ~2 coincidences expected
  CHECK(distinct.size() > 700);    // uniform draws cover most of the 984 starts
  CHECK(lo < 10);
  CHECK(hi > num_tokens - T - 1 - 10);
}

TEST_CASE("BatchSampler: the union of all ranks' slots is every slot, once") {
  auto sampler = BatchSampler::Create(1, 10, 4, 100);
  REQUIRE(sampler.ok());
  for (int peers = 1; peers <= 12; ++peers) {
    std::vector<int> all;
    size_t min_share = 100, max_share = 0;
    for (int r = 0; r < peers; ++r) {
      std::vector<int> mine = sampler->SlotsOf(r, peers);
      for (int s : mine) CHECK(s % peers == r);
      min_share = std::min(min_share, mine.size());
      max_share = std::max(max_share, mine.size());
      all.insert(all.end(), mine.begin(), mine.end());
    }
    std::sort(all.begin(), all.end());
    std::vector<int> expected(10);
    for (int s = 0; s < 10; ++s) expected[s] = s;
    CHECK(all == expected);
    CHECK(max_share - min_share <= 1);  // uneven shares differ by at most one
  }
  CHECK(sampler->SlotsOf(3, 3).empty());  // invalid rank
}

TEST_CASE("BatchSampler: 3 peers draw the same windows as 1 peer") {
  auto sampler = BatchSampler::Create(7, 12, 8, 5000);
  REQUIRE(sampler.ok());
  for (int64_t step = 0; step < 5; ++step) {
    std::multiset<uint64_t> one, three;
    for (int s : sampler->SlotsOf(0, 1)) one.insert(sampler->WindowStart(step, s));
    for (int r = 0; r < 3; ++r) {
      for (int s : sampler->SlotsOf(r, 3)) three.insert(sampler->WindowStart(step, s));
    }
    CHECK(one == three);
    CHECK(one.size() == 12);
  }
}

TEST_CASE("BatchSampler rejects data shorter than one window") {
  auto bad = BatchSampler::Create(1, 4, 16, 16);
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.status().message().find("16 tokens") != std::string::npos);
  CHECK_FALSE(BatchSampler::Create(1, 0, 16, 100).ok());
  auto exact = BatchSampler::Create(1, 4, 16, 17);  // exactly one window
  REQUIRE(exact.ok());
  CHECK(exact->WindowStart(3, 2) == 0);
}

TEST_CASE("ReadWindows gives tokens and targets shifted by one") {
  std::string dir = "/tmp/rt_sampler_test_" + std::to_string(getpid());
  struct Cleanup {
    std::string d;
    ~Cleanup() { std::filesystem::remove_all(d); }
  } cleanup{dir};
  std::vector<uint32_t> train(300), val(50);
  for (size_t i = 0; i < train.size(); ++i) train[i] = static_cast<uint32_t>(i % 250);
  for (size_t i = 0; i < val.size(); ++i) val[i] = static_cast<uint32_t>(i);
  REQUIRE(rt::data::WriteTokenDataset(dir, 256, train, val, 1000, 200).ok());
  auto ds = rt::data::TokenDataset::Open(dir, "train");
  REQUIRE(ds.ok());
  std::vector<uint64_t> starts = {0, 5, 283};
  std::vector<int32_t> tokens(3 * 16), targets(3 * 16);
  rt::data::ReadWindows(*ds, starts, 16, tokens.data(), targets.data());
  for (int i = 0; i < 3; ++i) {
    for (int j = 0; j < 16; ++j) {
      CHECK(tokens[i * 16 + j] == static_cast<int32_t>(train[starts[i] + j]));
      CHECK(targets[i * 16 + j] == static_cast<int32_t>(train[starts[i] + j + 1]));
    }
  }
}

TEST_CASE("EvenlySpacedWindows spans the split from its start to its last window") {
  auto w = rt::data::EvenlySpacedWindows(1000, 16, 5);
  REQUIRE(w.size() == 5);
  CHECK(w.front() == 0);
  CHECK(w.back() == 1000 - 17);
  CHECK(std::is_sorted(w.begin(), w.end()));
  CHECK(rt::data::EvenlySpacedWindows(10, 16, 5).empty());
  CHECK(rt::data::EvenlySpacedWindows(17, 16, 1) == std::vector<uint64_t>{0});
}
