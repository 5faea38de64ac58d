// The data-fetch server of a peer (see data_server.h).
#include "fetch/data_server.h"

#include <fcntl.h>
#include <unistd.h>

#include <array>
#include <cstdlib>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/log.h"
#include "data/durable_file.h"
#include "fetch/fetch_messages.h"

namespace rt::fetch {
namespace {

DataServerOptions WithTestPause(DataServerOptions o) {
  int ms = 0;
  if (const char* v = std::getenv("RINGTRAIN_TEST_SERVE_PAUSE_MS");
      v != nullptr && absl::SimpleAtoi(v, &ms) && ms > 0 && o.chunk_pause == absl::ZeroDuration()) {
    o.chunk_pause = absl::Milliseconds(ms);
  }
  return o;
}

}  // namespace

DataServer::DataServer(std::shared_ptr<net::TcpNode> node, std::shared_ptr<LocalData> data,
                       DataServerOptions options)
    : node_(std::move(node)), data_(std::move(data)), options_(WithTestPause(options)) {
  node_->SetDataFetchHandler([this](std::shared_ptr<net::TcpConnection> conn) {
    std::lock_guard<std::mutex> lock(mu_);
    ReapLocked();
    if (stop_ || static_cast<int>(clients_.size()) >= kMaxDataClients) {
      conn->Close();
      return;
    }
    clients_.emplace_back();
    Client& c = clients_.back();
    c.conn = std::move(conn);
    c.thread = std::thread([this, &c] {
      Serve(*c.conn);
      c.conn->Close();
      std::lock_guard<std::mutex> lock(mu_);
      c.done = true;
    });
  });
}

DataServer::~DataServer() {
  node_->SetDataFetchHandler(nullptr);
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
    for (Client& c : clients_) c.conn->Close();
  }
  // Threads end once their connection fails; none touches clients_ but its own entry.
  for (Client& c : clients_) c.thread.join();
}

void DataServer::ReapLocked() {
  for (auto it = clients_.begin(); it != clients_.end();) {
    if (it->done) {
      it->thread.join();
      it = clients_.erase(it);
    } else {
      ++it;
    }
  }
}

uint64_t DataServer::bytes_served() const {
  std::lock_guard<std::mutex> lock(mu_);
  return bytes_served_;
}

absl::Status DataServer::Send(net::TcpConnection& conn, const FetchMessage& m) {
  return conn.SendOwned(net::FrameType::kData, EncodeFetchMessage(m));
}

void DataServer::Serve(net::TcpConnection& conn) {
  const std::string peer = conn.peer_name();
  while (true) {
    std::vector<uint8_t> bytes;
    absl::Status st = conn.RecvControl(&bytes, options_.idle_timeout);
    if (!st.ok()) break;  // the client closed, or went quiet
    absl::StatusOr<FetchMessage> m = DecodeFetchMessage(bytes, peer);
    if (!m.ok()) {
      LogWarning("%s", m.status().message());
      break;
    }
    FetchMessage answer;
    switch (m->kind) {
      case FetchKind::kManifestRequest: {
        std::string text = data_->WaitForManifest(options_.manifest_wait);
        if (text.empty()) {
          answer.kind = FetchKind::kNoData;
          answer.text = "this peer has no data directory yet";
        } else {
          answer.kind = FetchKind::kManifest;
          answer.text = std::move(text);
        }
        st = Send(conn, answer);
        break;
      }
      case FetchKind::kStatusRequest:
        answer.kind = FetchKind::kStatus;
        answer.complete = data_->complete();
        answer.have_bytes = data_->have_bytes();
        answer.total_bytes = data_->total_bytes();
        st = Send(conn, answer);
        break;
      case FetchKind::kFileRequest:
        st = SendFile(conn, m->file, m->offset);
        break;
      default:
        LogWarning("data client %s sent a %s message, which only servers send", peer,
                   FetchKindName(m->kind));
        return;
    }
    if (!st.ok()) {
      LogDebug("data client %s: %s", peer, st.message());
      break;
    }
  }
  // Let the last answer go out before the connection closes.
  (void)conn.WaitSendsDone(absl::Seconds(5));
}

absl::Status DataServer::SendFile(net::TcpConnection& conn, const std::string& file,
                                  uint64_t offset) {
  auto refuse = [&](const std::string& why) {
    FetchMessage r;
    r.kind = FetchKind::kRefused;
    r.file = file;
    r.text = why;
    return Send(conn, r);
  };
  if (absl::Status ok = data_->CheckServable(file); !ok.ok()) {
    LogWarning(
        "refusing %s to %s: it is corrupt here (%s); delete it and run `ringtrain "
        "fetch-data` to fetch a good copy",
        file, conn.peer_name(), ok.message());
    return refuse(absl::StrCat("corrupt on this peer: ", ok.message()));
  }
  LocalData::FileView v = data_->WaitFor(file, 0, options_.stall);
  if (!v.known)
    return refuse(v.size == 0 && !data_->has_manifest() ? "this peer has no manifest yet"
                                                        : "not available on this peer (yet)");
  if (offset > v.size) {
    return refuse(absl::StrFormat("offset %d is past its size %d", offset, v.size));
  }
  FetchMessage start;
  start.kind = FetchKind::kFileStart;
  start.file = file;
  start.size = v.size;
  if (absl::Status st = Send(conn, start); !st.ok()) return st;
  const uint64_t generation = v.generation;
  int fd = -1;
  std::string fd_path;
  // Chunks are sent from a few buffers at a time: each must stay valid until its
  // send completes (SendData), and the wait bounds what is queued for a slow link.
  constexpr int kBuffers = 4;
  std::array<std::vector<uint8_t>, kBuffers> buffers;
  std::vector<uint8_t> chunk(options_.chunk_bytes);
  int used = 0;
  uint64_t pos = offset;
  absl::Status st;
  while (pos < v.size) {
    v = data_->WaitFor(file, pos, options_.stall);
    if (v.generation != generation) {
      st = refuse("its bytes here started over (they failed their check): ask again");
      break;
    }
    if (!v.whole && v.bytes <= pos) {
      st = refuse("stalled: this peer's own fetch of it made no progress");
      break;
    }
    if (fd < 0 || (v.path != fd_path && !v.whole)) {
      if (fd >= 0) close(fd);
      fd = open(v.path.c_str(), O_RDONLY | O_CLOEXEC);
      fd_path = v.path;
      if (fd < 0) {
        // Renamed from .part to its final name between the view and the open (the
        // fetcher renames before it says the file is whole): the same bytes are there.
        fd_path = absl::StrCat(data_->dir(), "/", file);
        fd = open(fd_path.c_str(), O_RDONLY | O_CLOEXEC);
      }
      if (fd < 0) {
        st = refuse(
            absl::StrCat("cannot open it here: ", data::ErrnoStatus(errno, v.path).message()));
        break;
      }
    }
    while (pos < v.bytes) {
      const size_t want = static_cast<size_t>(std::min<uint64_t>(chunk.size(), v.bytes - pos));
      const ssize_t got = pread(fd, chunk.data(), want, static_cast<off_t>(pos));
      if (got <= 0) {
        st = refuse(absl::StrFormat("read error at byte %d here", pos));
        break;
      }
      if (used == kBuffers) {
        st = conn.WaitSendsDone(options_.idle_timeout);
        if (!st.ok()) break;  // the wait below closes a stuck link before the buffers go
        used = 0;
      }
      std::vector<uint8_t>& b = buffers[used++];
      b.clear();
      EncodeChunk(file, pos, absl::MakeConstSpan(chunk.data(), static_cast<size_t>(got)), &b);
      st = conn.SendData(b, 0);
      if (!st.ok()) break;
      pos += static_cast<uint64_t>(got);
      {
        std::lock_guard<std::mutex> lock(mu_);
        bytes_served_ += static_cast<uint64_t>(got);
      }
      if (options_.chunk_pause > absl::ZeroDuration()) {
        std::this_thread::sleep_for(absl::ToChronoMilliseconds(options_.chunk_pause));
      }
    }
    if (!st.ok()) break;
  }
  if (fd >= 0) close(fd);
  absl::Status sent = conn.WaitSendsDone(options_.idle_timeout);
  if (absl::IsDeadlineExceeded(sent)) {
    // `buffers` must not be read after they go: closing stops every write first.
    conn.Close();
    (void)conn.WaitSendsDone(absl::Seconds(30));
  }
  return st.ok() ? sent : st;
}

}  // namespace rt::fetch
