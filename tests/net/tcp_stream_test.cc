// Streaming large messages between two ring peers in both directions at once (the
// allreduce pattern): every byte arrives intact, and the rate is reported.
#include <doctest/doctest.h>

#include <cstdio>
#include <thread>
#include <vector>

#include "core/clock.h"
#include "core/crc32c.h"
#include "net/tcp_ring.h"
#include "net_test_util.h"

using namespace rt::net::testing;

TEST_CASE("tcp ring: 2 peers stream large messages both ways intact") {
#ifdef RINGTRAIN_SANITIZED
  const size_t kChunk = 1 << 20, kChunks = 16;
#else
  const size_t kChunk = 4 << 20, kChunks = 64;  // 256 MiB each way
#endif
  auto hosts = LoopbackHosts(2);
  auto results = FormRings({RingOptions(hosts, 0), RingOptions(hosts, 1)});
  REQUIRE(results[0].ok());
  REQUIRE(results[1].ok());
  std::vector<std::vector<uint8_t>> data(2, std::vector<uint8_t>(kChunk * kChunks));
  for (int p = 0; p < 2; ++p) {
    for (size_t i = 0; i < data[p].size(); ++i)
      data[p][i] = static_cast<uint8_t>((i * 2654435761u) >> (13 + p));
  }
  std::vector<uint32_t> sent_crc(2), got_crc(2);
  std::vector<std::string> errors(2);
  rt::Stopwatch watch;
  std::vector<std::thread> threads;
  for (int p = 0; p < 2; ++p) {
    threads.emplace_back([&, p] {
      auto& ring = **results[p];
      std::vector<uint8_t> in;
      const size_t window = 4;  // chunks in flight, as a pipelined allreduce would keep
      for (size_t c = 0; c < kChunks; ++c) {
        absl::Span<const uint8_t> chunk(data[p].data() + c * kChunk, kChunk);
        sent_crc[p] = rt::Crc32cExtend(sent_crc[p], chunk.data(), chunk.size());
        auto st = ring.SendToNext(chunk);
        if (!st.ok()) return void(errors[p] = st.ToString());
        if (c + 1 >= window) {
          st = ring.RecvFromPrev(&in, absl::Seconds(60));
          if (!st.ok()) return void(errors[p] = st.ToString());
          got_crc[p] = rt::Crc32cExtend(got_crc[p], in.data(), in.size());
        }
      }
      for (size_t c = 0; c + 1 < window; ++c) {
        auto st = ring.RecvFromPrev(&in, absl::Seconds(60));
        if (!st.ok()) return void(errors[p] = st.ToString());
        got_crc[p] = rt::Crc32cExtend(got_crc[p], in.data(), in.size());
      }
      auto st = ring.WaitSendsDone(absl::Seconds(60));
      if (!st.ok()) errors[p] = st.ToString();
    });
  }
  for (auto& t : threads) t.join();
  double seconds = watch.ElapsedSeconds();
  CHECK_MESSAGE(errors[0].empty(), errors[0]);
  CHECK_MESSAGE(errors[1].empty(), errors[1]);
  CHECK(got_crc[0] == sent_crc[1]);
  CHECK(got_crc[1] == sent_crc[0]);
  double gbps = static_cast<double>(kChunk * kChunks) / seconds / 1e9;
  MESSAGE("streamed " << kChunk * kChunks / (1 << 20) << " MiB each way in " << seconds
                      << " s: " << gbps << " GB/s per direction (one process, shared cores)");
  std::fprintf(stderr, "tcp stream: %.2f GB/s per direction\n", gbps);
}
