// Writes the seed corpus of every fuzz target (tests/fuzz/<target>/seed-*) with the
// real encoders, so that the seeds stay valid when a format changes: run
// `tools/fuzz --make-seeds`. Hand-written edge cases sit beside them as edge-* files.
//   fuzz_make_seeds OUT_DIR
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "ckpt/manifest.h"
#include "cluster/messages.h"
#include "cluster/state_messages.h"
#include "collective/block_quant.h"
#include "collective/link_matrix.h"
#include "collective/piece_exchange_plan.h"
#include "collective/sparse_codec.h"
#include "core/bf16.h"
#include "data/data_manifest.h"
#include "data/token_shard.h"
#include "fetch/fetch_messages.h"
#include "fuzz_check.h"
#include "net/frame.h"
#include "net/frame_codec.h"
#include "net/handshake.h"
#include "observe/peer_report.h"

namespace {

namespace fs = std::filesystem;
std::string g_out;
int g_written = 0;

void Write(const std::string& target, const std::string& name, const void* data, size_t n) {
  const fs::path dir = fs::path(g_out) / target;
  fs::create_directories(dir);
  std::ofstream f(dir / ("seed-" + name), std::ios::binary | std::ios::trunc);
  f.write(static_cast<const char*>(data), static_cast<std::streamsize>(n));
  if (!f) {
    std::fprintf(stderr, "cannot write %s\n", (dir / name).c_str());
    std::exit(1);
  }
  ++g_written;
}
void Write(const std::string& target, const std::string& name, const std::vector<uint8_t>& b) {
  Write(target, name, b.data(), b.size());
}
void Write(const std::string& target, const std::string& name, const std::string& s) {
  Write(target, name, s.data(), s.size());
}

void Frames() {
  using namespace rt::net;
  FrameHeader h;
  h.type = FrameType::kControl;
  h.epoch = 3;
  h.step = 120;
  Write("frame", "control", EncodeFrame(h, std::vector<uint8_t>{1, 2, 3, 4, 5}));
  h.type = FrameType::kData;
  h.codec = 2;
  h.sequence = 7;
  std::vector<uint8_t> payload(200);
  for (size_t i = 0; i < payload.size(); ++i) payload[i] = static_cast<uint8_t>(i * 7);
  Write("frame", "data", EncodeFrame(h, payload));
  h = FrameHeader{};
  h.type = FrameType::kHello;
  Write("frame", "empty-hello", EncodeFrame(h, {}));

  // What one connection receives: the handshake, then control and data frames, on a
  // plain link and on one sealed under the frame target's key.
  for (bool sealed : {false, true}) {
    OutgoingFrames out;
    if (sealed) out.SetKey(rt::fuzz::kFrameKey);
    out.set_epoch(4);
    out.set_step(120);
    std::vector<uint8_t> stream;
    const std::vector<std::pair<FrameType, std::vector<uint8_t>>> frames = {
        {FrameType::kHello, {1, 2, 3}},       {FrameType::kProof, std::vector<uint8_t>(32, 7)},
        {FrameType::kFingerprint, {4, 5, 6}}, {FrameType::kControl, {9, 9}},
        {FrameType::kData, payload},
    };
    for (const auto& [type, bytes] : frames) {
      uint8_t header[kFrameHeaderBytes];
      std::vector<uint8_t> sealed_bytes;
      const bool is_sealed = out.NextIsSealed();
      if (!out.Encode(type, 0, bytes, nullptr, header, &sealed_bytes).ok()) std::exit(1);
      stream.insert(stream.end(), header, header + kFrameHeaderBytes);
      const std::vector<uint8_t>& body = is_sealed ? sealed_bytes : bytes;
      stream.insert(stream.end(), body.begin(), body.end());
    }
    Write("frame", sealed ? "stream-sealed" : "stream-plain", stream);
  }
}

void Handshake() {
  using namespace rt::net;
  Hello hello;
  hello.cluster_id = "cluster-a";
  hello.rank = 1;
  hello.endpoint = "10.0.0.2:29500";
  hello.channel = 0x52494e47;
  hello.dialer = true;
  for (size_t i = 0; i < hello.nonce.size(); ++i) hello.nonce[i] = static_cast<uint8_t>(i);
  Write("handshake", "hello", EncodeHello(hello));
  hello.endpoint = "[::1]:29501";
  hello.dialer = false;
  hello.encrypt = true;
  Write("handshake", "hello-v6-sealed", EncodeHello(hello));
  Write("handshake", "fingerprint",
        EncodeFingerprint(
            {{"model", "layers=2 heads=4 dim=64"}, {"lr", "0.001"}, {"tokenizer", "t1"}}));
  Write("handshake", "fingerprint-empty", EncodeFingerprint({}));
}

void ClusterMessages() {
  using namespace rt::cluster;
  View view{4, {"10.0.0.1:29500", "10.0.0.2:29500", "[::1]:29501"}};
  Heartbeat hb;
  hb.view = view;
  hb.state = {4, 120};
  hb.hosts_fingerprint = 0xabcdef;
  hb.training = true;
  hb.suspects = {"10.0.0.2:29500"};
  hb.report = {1, 2, 3};
  const std::vector<std::pair<std::string, Message>> messages = {
      {"heartbeat", hb},
      {"join", JoinRequest{{3, 100}, 0x1234}},
      {"proposal", ViewProposal{view}},
      {"ack", ViewAck{5, {4, 120}}},
      {"nack", ViewNack{5, 6, "10.0.0.1:29500"}},
      {"commit", ViewCommit{view, StepAgreement{{4, 120}, "10.0.0.1:29500", 119, {"[::1]:29501"}}}},
      {"leave", Leave{"removed from the hosts file", -1}},
  };
  for (const auto& [name, m] : messages) {
    Write("cluster_messages", name, EncodeEnvelope(Envelope{5, "10.0.0.1:29500", m}));
  }
}

void StateTransfer() {
  using namespace rt::cluster;
  Write("state_transfer", "request", EncodeStateRequest({{4, 120}}));
  StateManifest m;
  m.ok = true;
  m.version = {4, 120};
  m.chunk_bytes = 4 << 20;
  m.sections = {{"params", 4096, 0x11223344}, {"adam_m", 4096, 0x55667788}, {"rng", 16, 1}};
  Write("state_transfer", "manifest", EncodeStateManifest(m));
  StateManifest refused;
  refused.reason = "this peer holds step 119 (epoch 4), not the requested step 120 (epoch 4)";
  Write("state_transfer", "manifest-refused", EncodeStateManifest(refused));
  Write("state_transfer", "chunk", EncodeStateChunkHeader({1, 8192, 4096, 0xdeadbeef}));
  Write("state_transfer", "ack", EncodeStateAck({true, ""}));
  Write("state_transfer", "ack-refused", EncodeStateAck({false, "corrupt chunk"}));
}

void Sparse() {
  rt::collective::SparseVector v;
  for (uint32_t i = 0; i < 300; ++i) {
    v.indices.push_back(i * i % 7 + 9 * i);
    v.values.push_back(rt::FloatToBf16(0.01f * static_cast<float>(i) - 1.0f));
  }
  std::vector<uint8_t> out;
  rt::collective::EncodeSparse(v, 4000, 0, &out);
  Write("sparse_codec", "raw", out);
  rt::collective::EncodeSparse(v, 4000, 1, &out);
  Write("sparse_codec", "zstd", out);
  rt::collective::EncodeSparse({{5}, {rt::FloatToBf16(2.0f)}}, 1000, 0, &out);
  Write("sparse_codec", "one", out);
  rt::collective::EncodeSparse({}, 1000, 0, &out);
  Write("sparse_codec", "empty", out);
}

void BlockQuant() {
  std::vector<float> v(200);
  for (size_t i = 0; i < v.size(); ++i) v[i] = 0.01f * static_cast<float>(i % 37) - 0.2f;
  std::vector<uint8_t> out;
  rt::collective::EncodeQuantized(v, 8, {}, &out);
  Write("block_quant", "int8", out);
  rt::collective::EncodeQuantized(v, 4, {}, &out);
  Write("block_quant", "int4", out);
  rt::collective::EncodeQuantized(absl::MakeConstSpan(v.data(), 3), 4, {}, &out);
  Write("block_quant", "int4-odd", out);
}

void PieceDescriptors() {
  rt::collective::PieceDescriptor d;
  d.length = 100000;
  d.buffers = 2;
  d.chunk_floats = 1 << 20;
  d.held = {{0, 2500}, {10000, 12500}, {50000, 52500}};
  d.needed = {{2500, 5000}, {12500, 15000}};
  Write("piece_descriptor", "zero-member", rt::collective::EncodePieceDescriptor(d));
  d.held.clear();
  Write("piece_descriptor", "joiner", rt::collective::EncodePieceDescriptor(d));
  d.needed = {{0, d.length}};
  Write("piece_descriptor", "checkpoint-writer", rt::collective::EncodePieceDescriptor(d));
}

void LinkRows() {
  rt::collective::LinkMatrix m;
  m.peers = {0, 1, 2};
  m.bandwidth_bps = {{0, 1.2e9, 1.1e8}, {1.2e9, 0, 9.5e8}, {1.1e8, 9.4e8, 0}};
  m.rtt_s = {{0, 2e-4, 3e-4}, {2e-4, 0, 1e-4}, {3e-4, 1e-4, 0}};
  for (int i = 0; i < 3; ++i) Write("link_row", absl::StrCat("row", i), EncodeLinkRow(m, i));
  rt::collective::LinkMatrix two;
  two.peers = {0, 5};
  two.bandwidth_bps = {{0, 1e9}, {1e9, 0}};
  two.rtt_s = {{0, 1e-4}, {1e-4, 0}};
  Write("link_row", "two-peers", EncodeLinkRow(two, 1));
}

void PeerReports() {
  using namespace rt::observe;
  PeerReport r;
  r.figures.peer = "10.0.0.2:29500";
  r.figures.version = "0.1+abc";
  r.figures.state = "training";
  r.figures.step = 120;
  r.figures.loss = 3.25;
  r.figures.links = {{"10.0.0.1:29500", 1.2e9, 2e-4}};
  ClusterEvent e;
  e.unix_ms = 1700000000000;
  e.origin = "10.0.0.1:29500";
  e.seq = 1;
  e.kind = "view_change";
  e.epoch = 4;
  e.step = 119;
  e.message = "view 4: 3 members";
  e.leader = "10.0.0.1:29500";
  e.members = {"10.0.0.1:29500", "10.0.0.2:29500"};
  e.joined = {"10.0.0.2:29500"};
  r.events = {e};
  Write("peer_report", "training", EncodePeerReport(r, 8192));
  Write("peer_report", "starting", EncodePeerReport(PeerReport{}, 8192));
}

void TokenShards() {
  // The writer works on files: write one, copy its bytes.
  const fs::path tmp = fs::temp_directory_path() / "ringtrain-make-seeds.bin";
  for (int width : {2, 4}) {
    auto w = rt::data::TokenShardWriter::Create(tmp.string(), width == 2 ? 1000 : 100000, width);
    if (!w.ok()) std::exit(1);
    std::vector<uint32_t> tokens;
    for (uint32_t i = 0; i < 40; ++i) tokens.push_back((i * 37) % 1000);
    if (!w->Append(tokens).ok() || !w->Finish().ok()) std::exit(1);
    std::ifstream f(tmp, std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    Write("token_shard", absl::StrCat("u", 8 * width), bytes);
  }
  fs::remove(tmp);
}

void DataManifests() {
  rt::data::DataManifest m;
  m.vocab_size = 8192;
  m.eot_id = 3;
  m.tokenizer_file = "tokenizer.model";
  m.tokenizer_crc = 0x1a2b3c4d;
  m.license = "CC BY-SA 3.0 (Wikipedia)";
  m.shards = {{"train", "train-00000.bin", 100000, 480000, 120, 0xdeadbeef},
              {"val", "val-00000.bin", 1000, 4800, 2, 0x01020304}};
  Write("data_manifest", "full", m.Serialize());
  rt::data::DataManifest small;
  small.vocab_size = 300;
  small.token_bytes = 2;
  Write("data_manifest", "minimal", small.Serialize());
}

void CkptManifests() {
  rt::ckpt::CheckpointMeta meta;
  meta.step = 1234;
  meta.epoch = 5;
  meta.fields = {{"config", "layers=2 heads=4"}, {"data cursor", "shard 3%"}, {"empty", ""}};
  Write("ckpt_manifest", "full",
        rt::ckpt::EncodeManifest(meta, {{"params", 4096, 0x11223344}, {"adam.m", 4096, 7}}));
  Write("ckpt_manifest", "minimal", rt::ckpt::EncodeManifest(rt::ckpt::CheckpointMeta{}, {}));
}

void FetchMessages() {
  using rt::fetch::FetchKind;
  using rt::fetch::FetchMessage;
  FetchMessage m;
  m.kind = FetchKind::kManifestRequest;
  Write("fetch_message", "manifest-request", rt::fetch::EncodeFetchMessage(m));
  m.kind = FetchKind::kManifest;
  m.text = "format ringtrain-data 1\nvocab_size 8192\n";
  Write("fetch_message", "manifest", rt::fetch::EncodeFetchMessage(m));
  m.kind = FetchKind::kFileRequest;
  m.file = "train-00001.bin";
  m.offset = 1 << 20;
  Write("fetch_message", "file-request", rt::fetch::EncodeFetchMessage(m));
  m.kind = FetchKind::kFileStart;
  m.size = 200000064;
  Write("fetch_message", "file-start", rt::fetch::EncodeFetchMessage(m));
  m.kind = FetchKind::kChunk;
  m.bytes = {1, 0, 2, 0, 3, 0, 4, 0};
  Write("fetch_message", "chunk", rt::fetch::EncodeFetchMessage(m));
  m.kind = FetchKind::kRefused;
  m.text = "corrupt on this peer: train-00001.bin: payload checksum 1a2b3c4d";
  Write("fetch_message", "refused", rt::fetch::EncodeFetchMessage(m));
  FetchMessage s;
  s.kind = FetchKind::kStatus;
  s.complete = true;
  s.have_bytes = s.total_bytes = 12345;
  Write("fetch_message", "status", rt::fetch::EncodeFetchMessage(s));
}

void TextFormats() {
  Write("hosts_file", "ipv4",
        "# ring of three\n10.0.0.1\n10.0.0.2:29501\n10.0.0.3:29500  # last\n");
  Write("hosts_file", "mixed", "[::1]:29501\n[fe80::1]\n127.0.0.1:30000\nnode-a.example\n");
  Write("flagfile", "train",
        "# training flags\n--fuzz-int=4\n--fuzz_string \"a b\"\n--fuzz-bool\n--nofuzz-bool\n"
        "--fuzz-double=1e-3\n--fuzz-list=a,b,c\n");
  Write("json", "status",
        "{\"peer\":\"10.0.0.2:29500\",\"step\":120,\"loss\":3.25,\"training\":true,"
        "\"links\":[{\"to\":\"[::1]:29501\",\"bytes_per_s\":1.2e9}],\"val\":null}\n");
  Write("json", "escapes", "[\"Xin ch\\u00e0o \\ud83d\\ude00\", -0.5e-3, [], {}, \"\\\"\\n\"]");
  Write("flagfile", "quotes", "--fuzz-string='x'\n\n   --fuzz-int 7\r\n");
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s OUT_DIR\n", argv[0]);
    return 2;
  }
  g_out = argv[1];
  Frames();
  Handshake();
  ClusterMessages();
  StateTransfer();
  Sparse();
  BlockQuant();
  LinkRows();
  PieceDescriptors();
  PeerReports();
  TokenShards();
  DataManifests();
  CkptManifests();
  TextFormats();
  FetchMessages();
  std::printf("wrote %d seeds under %s\n", g_written, g_out.c_str());
  return 0;
}
