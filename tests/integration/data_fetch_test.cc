// Data from peers, with the real binary on loopback: three peers train to the end when
// only one holds the prepared directory (one starts without one, one with a fetch cut
// half-way), all from byte-identical files; `fetch-data` killed with -9 resumes at the
// byte it had checked and fetches only the rest; a corrupt shard on the nearest source
// is refused, named, and fetched from another peer.
#include <doctest/doctest.h>

#include <signal.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "cli_runner.h"
#include "data/data_manifest.h"
#include "data/token_dataset.h"
#include "fetch/data_files.h"
#include "fetch/partial_file.h"
#include "process_group.h"

namespace {

using rt::integration::JsonField;
using rt::integration::NonEmptyLines;
using rt::integration::ProcessGroup;
using rt::integration::ReadFile;
using rt::integration::RunResult;
using rt::integration::RunRingtrain;
using rt::integration::TempDir;

bool Contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

std::string WriteHosts(const TempDir& tmp, int peers, int base_port) {
  const std::string path = tmp / "hosts";
  std::ofstream f(path);
  for (int r = 0; r < peers; ++r) f << "127.0.0.1:" << base_port + r << "\n";
  return path;
}

std::string Endpoint(int base_port, int rank) {
  return "127.0.0.1:" + std::to_string(base_port + rank);
}

// Every file the manifest of `a` lists, and the manifest itself, equal in `b`.
void CheckSameData(const std::string& a, const std::string& b) {
  absl::StatusOr<rt::data::DataManifest> m = rt::data::ReadManifest(a);
  REQUIRE(m.ok());
  CHECK(ReadFile(a + "/manifest.txt") == ReadFile(b + "/manifest.txt"));
  for (const rt::fetch::DataFile& f : rt::fetch::ManifestFiles(*m)) {
    INFO(b, "/", f.name);
    CHECK(ReadFile(a + "/" + f.name) == ReadFile(b + "/" + f.name));
  }
  CHECK_FALSE(std::filesystem::exists(b + "/.fetch"));
}

// What a fetch killed mid-way leaves: the manifest in .fetch, the first listed file
// (the tokenizer) whole, and the first `part_bytes` of the next one with their record.
void HalfFetch(const std::string& from, const std::string& to, uint64_t part_bytes) {
  absl::StatusOr<rt::data::DataManifest> m = rt::data::ReadManifest(from);
  REQUIRE(m.ok());
  const std::vector<rt::fetch::DataFile> files = rt::fetch::ManifestFiles(*m);
  REQUIRE(files.size() >= 2);
  std::filesystem::create_directories(to + "/.fetch");
  std::filesystem::copy(from + "/manifest.txt", to + "/.fetch/manifest.txt");
  std::filesystem::copy(from + "/" + files[0].name, to + "/" + files[0].name);
  const std::string next = ReadFile(from + "/" + files[1].name);
  REQUIRE(next.size() > part_bytes);
  std::string note;
  auto p = rt::fetch::PartialFile::Open(to, files[1].name, next.size(), &note);
  REQUIRE(p.ok());
  REQUIRE(
      (*p)->Append(absl::MakeConstSpan(reinterpret_cast<const uint8_t*>(next.data()), part_bytes))
          .ok());
}

// The "N bytes" of the last "data fetch: ... files, N bytes" report in `log`, or -1.
long long FetchedBytes(const std::string& log) {
  const std::string key = " files, ";
  long long n = -1;
  for (const std::string& line : NonEmptyLines(log)) {
    const size_t at = line.find(key);
    if (line.find("data fetch: ") != std::string::npos && at != std::string::npos) {
      n = std::stoll(line.substr(at + key.size()));
    }
  }
  return n;
}

}  // namespace

TEST_CASE("data fetch: three peers train to the end when only one holds the data") {
  TempDir tmp;
  {
    std::ofstream text(tmp / "vi.txt");
    const char* paragraphs[] = {
        "Hà Nội là thủ đô của nước Cộng hòa Xã hội chủ nghĩa Việt Nam.",
        "Đà Nẵng có 8 quận, huyện và dân số khoảng 1,2 triệu người.",
        "Sông Mê Kông chảy qua sáu quốc gia trước khi đổ ra Biển Đông.",
    };
    for (int r = 0; r < 80; ++r) {
      for (const char* p : paragraphs) text << p << "\n\n";
    }
  }
  RunResult prep = RunRingtrain({"prepare", "--input", tmp / "vi.txt", "--out", tmp / "data0",
                                 "--vocab-size=320", "--val-fraction=0.1", "--threads=1"},
                                tmp.path());
  INFO(prep.err);
  REQUIRE(prep.exit_code == 0);
  // Peer 1 has no directory at all; peer 2 a fetch cut after the tokenizer and 100
  // bytes of the next file.
  HalfFetch(tmp / "data0", tmp / "data2", 100);

  const int base = rt::integration::TestBasePort();
  const std::string hosts = WriteHosts(tmp, 3, base);
  ProcessGroup group(tmp.path());
  for (int r = 0; r < 3; ++r) {
    group.Start(
        {RINGTRAIN_BINARY,   "train",           "--hosts",    hosts,
         "--rank",           std::to_string(r), "--data",     tmp / ("data" + std::to_string(r)),
         "--steps=15",       "--check-every=1", "--layers=2", "--heads=2",
         "--dim=32",         "--seq-len=16",    "--batch=4",  "--threads=1",
         "--precision=fp32", "--eval-every=0",  "--warmup=0", "--probe-every=-1",
         "--wait=60",        "--fetch-wait=60", "--metrics",  tmp / "m.jsonl"},
        {"OMP_NUM_THREADS=1"});
  }
  std::vector<RunResult> r = group.WaitAll(150);
  for (int i = 0; i < 3; ++i) {
    INFO("peer ", i, " stderr:\n", r[i].err);
    REQUIRE(r[i].exit_code == 0);
  }
  CheckSameData(tmp / "data0", tmp / "data1");
  CheckSameData(tmp / "data0", tmp / "data2");
  CHECK(Contains(r[1].err, "is missing or incomplete: fetching it from the peers first"));
  CHECK(Contains(r[2].err, "resuming at byte 100 of"));
  CHECK_FALSE(Contains(r[0].err, "fetching it from the peers"));
  // Identical data and identical replicas: the same param_hash at the last step.
  std::vector<std::string> last(3);
  for (int i = 0; i < 3; ++i) {
    const auto lines = NonEmptyLines(ReadFile(tmp / ("m.rank" + std::to_string(i) + ".jsonl")));
    REQUIRE(lines.size() == 15);
    last[i] = JsonField(lines.back(), "param_hash");
  }
  CHECK(last[1] == last[0]);
  CHECK(last[2] == last[0]);
}

TEST_CASE("data fetch: killed with -9, fetch-data resumes where it stopped") {
  TempDir tmp;
  // ~6 MB of train tokens, served at ~1 MiB per 150 ms so the fetch lasts about a second.
  std::vector<uint32_t> train(3'000'000), val(100'000);
  for (size_t i = 0; i < train.size(); ++i) train[i] = static_cast<uint32_t>((i * 7919) % 5000);
  for (size_t i = 0; i < val.size(); ++i) val[i] = static_cast<uint32_t>((i * 31) % 5000);
  REQUIRE(rt::data::WriteTokenDataset(tmp / "held", 5000, train, val, 1, 1).ok());
  const int base = rt::integration::TestBasePort() + 10;
  const std::string hosts = WriteHosts(tmp, 2, base);
  ProcessGroup group(tmp.path());
  const std::vector<std::string> slow = {"RINGTRAIN_TEST_SERVE_PAUSE_MS=150"};
  group.Start({RINGTRAIN_BINARY, "fetch-data", "--hosts", hosts, "--rank=0", "--data", tmp / "held",
               "--fetch-wait=60"},
              slow);
  const size_t first = group.Start({RINGTRAIN_BINARY, "fetch-data", "--hosts", hosts, "--rank=1",
                                    "--data", tmp / "new", "--fetch-wait=60", "--serve=false"});
  // Kill it once its progress record shows at least 2 MiB of the train shard.
  const std::string record = tmp / "new/.fetch/train-00000.bin.progress";
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  uint64_t had = 0;
  while (std::chrono::steady_clock::now() < deadline) {
    std::istringstream in(ReadFile(record));
    std::string head, version, name;
    uint64_t size = 0, bytes = 0;
    if (in >> head >> version >> name >> size >> bytes && bytes >= (2u << 20)) {
      REQUIRE(bytes < size);
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  group.Kill(first);
  {
    std::istringstream in(ReadFile(record));
    std::string head, version, name;
    uint64_t size = 0;
    REQUIRE(static_cast<bool>(in >> head >> version >> name >> size >> had));
  }
  REQUIRE(had >= (2u << 20));
  // Serving (the default) until the holder has seen it complete, so the holder ends too.
  RunResult again = RunRingtrain(
      {"fetch-data", "--hosts", hosts, "--rank=1", "--data", tmp / "new", "--fetch-wait=60"},
      tmp.path(), 60);
  INFO(again.err);
  REQUIRE(again.exit_code == 0);
  CHECK(Contains(again.err, "resuming at byte " + std::to_string(had)));
  const uint64_t total = std::filesystem::file_size(tmp / "held/train-00000.bin") +
                         std::filesystem::file_size(tmp / "held/val-00000.bin");
  CHECK(FetchedBytes(again.err) == static_cast<long long>(total - had));
  CheckSameData(tmp / "held", tmp / "new");
  std::vector<RunResult> rest = group.WaitAll(60);
  INFO("holder:\n", rest[0].err);
  CHECK(rest[0].exit_code == 0);  // served until the fetcher had everything
}

TEST_CASE(
    "data fetch: a corrupt shard on the nearest source is refused, named, fetched elsewhere") {
  TempDir tmp;
  std::vector<uint32_t> train(200'000), val(20'000);
  for (size_t i = 0; i < train.size(); ++i) train[i] = static_cast<uint32_t>((i * 13) % 700);
  for (size_t i = 0; i < val.size(); ++i) val[i] = static_cast<uint32_t>((i * 17) % 700);
  REQUIRE(rt::data::WriteTokenDataset(tmp / "good", 700, train, val, 1, 1).ok());
  std::filesystem::copy(tmp / "good", tmp / "bad");
  {
    std::fstream f(tmp / "bad/train-00000.bin", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(1000);
    f.put('\x01');  // a token changed: the payload checksum no longer matches
  }
  const int base = rt::integration::TestBasePort() + 20;
  const std::string hosts = WriteHosts(tmp, 3, base);
  ProcessGroup group(tmp.path());
  // Rank 1 fetches; its predecessor, rank 0, holds the corrupt copy.
  group.Start({RINGTRAIN_BINARY, "fetch-data", "--hosts", hosts, "--rank=0", "--data", tmp / "bad",
               "--fetch-wait=60"});
  group.Start({RINGTRAIN_BINARY, "fetch-data", "--hosts", hosts, "--rank=1", "--data", tmp / "new",
               "--fetch-wait=60"});
  group.Start({RINGTRAIN_BINARY, "fetch-data", "--hosts", hosts, "--rank=2", "--data", tmp / "good",
               "--fetch-wait=60"});
  std::vector<RunResult> r = group.WaitAll(90);
  INFO("fetcher:\n", r[1].err, "\ncorrupt holder:\n", r[0].err);
  REQUIRE(r[1].exit_code == 0);
  CHECK(r[0].exit_code == 0);
  CHECK(r[2].exit_code == 0);
  CheckSameData(tmp / "good", tmp / "new");
  CHECK(Contains(r[1].err, "refused train-00000.bin from " + Endpoint(base, 0)));
  CHECK(Contains(r[1].err, "corrupt"));
  CHECK(Contains(r[0].err, "refusing train-00000.bin"));
  CHECK(Contains(r[1].err, "from " + Endpoint(base, 2)));
}
