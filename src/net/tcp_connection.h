// TcpConnection: one TCP socket speaking frames (frame.h), with thread-safe queues.
//
// Internal to net/ (TcpNode creates them, Link and TcpRing use them). Socket I/O runs
// on the connection's io_context thread, and once established on the connection's own
// reader and writer threads; the public send/receive methods are called from other
// threads and block on a condition variable, never on the socket.
//
// Life cycle: created by TcpNode, StartReading() with a handshake handler (hello,
// proof and fingerprint frames go to it), SetFrameKeys() when the link is sealed
// (--encrypt), Establish() once authenticated; from then on data frames go to the data
// queue and control frames to the control queue, and (LinkOptions::worker_threads) a
// reader and a writer thread of the connection take the socket over from the io thread
// at the next frame boundary. Any violation (bad or unauthentic frame, wrong order,
// older epoch, peer error frame, EOF) fails the connection: the socket is closed and
// every waiter returns the error, which names the peer.
//
// Files: the frames themselves are made and checked by frame_codec.h only. This
// class's methods live in three files, one job each: tcp_connection.cc (the user side:
// queues, sends, receives into place, errors), tcp_connection_asio.cc (the Asio engine:
// reads and writes on the io thread during the handshake) and
// tcp_connection_threads.cc (the blocking reader and writer threads after it).
#pragma once

#include "net/asio_types.h"  // first: it orders a libstdc++ header before Asio's

#include <sys/uio.h>

#include <array>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "net/frame.h"
#include "net/frame_codec.h"

namespace rt::net {

inline constexpr size_t kMaxFramesPerWrite = 16;  // frames per gather write

struct LinkOptions {
  FrameLimits limits;  // per frame type; bigger frames are refused when their header arrives
  size_t max_queued_messages = 64;  // received but not yet taken; reading pauses beyond
  // Reading also pauses once this many payload bytes wait to be taken: on loopback a
  // short queue keeps received buffers in cache (measured: faster allreduce).
  size_t max_queued_bytes = size_t{16} << 20;
  // Once established, the connection's frames are read and written by two threads
  // of its own with blocking system calls instead of by the io thread: a blocked
  // recv()/sendmsg() is woken by the kernel directly, without an epoll round trip
  // and a hand-off between Asio threads. Measured on 2 local peers (124M-float
  // allreduce): 9.8k -> 4.0k system calls and 0.216 -> 0.209 s CPU per allreduce
  // and process, busbw 2.16 -> 2.26 GB/s. The handshake stays on Asio. Off: every
  // frame goes through the io thread (kept for tests of that path).
  bool worker_threads = true;
  // Fault injection for tests: the io thread sleeps this long in the middle of
  // handing the socket to the worker threads, so that sends racing with the
  // hand-over are exercised deterministically. Zero in production.
  absl::Duration handover_pause = absl::ZeroDuration();
};

class TcpConnection : public std::enable_shared_from_this<TcpConnection> {
 public:
  // Runs on the io thread for each handshake-type frame (hello, proof, fingerprint).
  using FrameHandler = std::function<void(const FrameHeader&, std::vector<uint8_t>&&)>;
  // Runs once on the io thread when the connection fails (never after Close()).
  using ErrorHandler = std::function<void(const absl::Status&)>;

  TcpConnection(asio::ip::tcp::socket socket, std::string peer_name, const LinkOptions& options);
  ~TcpConnection();
  TcpConnection(const TcpConnection&) = delete;
  TcpConnection& operator=(const TcpConnection&) = delete;

  // ---- io thread ----
  void StartReading(FrameHandler handshake_handler, ErrorHandler on_error);
  // Seals the link: frames from kFirstSealedSequence on, both ways, are sealed under
  // these keys (call before the peer's frame kFirstSealedSequence is read and before
  // this end sends its own).
  void SetFrameKeys(const FrameKeys& keys);
  // Data/control frames are accepted from now on; errors name the peer as `peer_name`.
  void Establish(int peer_rank, std::string peer_name);
  bool sealed() const { return sealed_.load(); }

  // ---- any thread ----
  // Queues a frame whose payload is owned by the connection (handshake, control, error).
  absl::Status SendOwned(FrameType type, std::vector<uint8_t> payload);
  // Sends an error frame carrying `reason`, then closes the connection once it is written.
  void SendErrorAndClose(const std::string& reason);
  // Fails the connection with `status` (first error wins) and closes the socket.
  void Fail(const absl::Status& status);
  void Close();  // Fail with "closed locally" without calling the error handler
  absl::Status status() const;
  // The kernel's retransmission timeout of this connection (TCP_INFO tcpi_rto, ms: about
  // RTT + 4 x its deviation, at least 200 ms), or -1 before the connection has its worker
  // threads or after it closed. Any thread.
  int64_t KernelRtoMs() const;
  std::string peer_name() const;
  int peer_rank() const { return peer_rank_.load(); }
  asio::ip::tcp::socket& socket() { return socket_; }  // io thread only

  // ---- user thread (the RingTransport contract) ----
  // `data` must stay valid until WaitSendsDone() returns OK; crc32c is computed here
  // (on sealed links the payload is sealed here instead, into a buffer of the link's).
  absl::Status SendData(absl::Span<const uint8_t> data, uint8_t codec);
  // The same with the payload's crc32c computed by the caller (unused when sealed).
  absl::Status SendData(absl::Span<const uint8_t> data, uint8_t codec, uint32_t crc32c);
  // Until every data message is written, or the connection failed AND its socket is
  // closed (then the connection's error): after any result but DeadlineExceeded no
  // write still reads a caller's bytes.
  absl::Status WaitSendsDone(absl::Duration timeout);
  // The same, until at most `frames` data messages are still queued (not yet handed
  // to the kernel whole): a sender that keeps a bounded window of messages in flight
  // queues the next one after this. OK once at most `frames` remain; the messages
  // already handed over no longer read the caller's bytes.
  absl::Status WaitSendsAtMost(size_t frames, absl::Duration timeout);
  // Data messages queued and not yet handed to the kernel whole (any thread).
  size_t pending_data_messages() const;
  absl::Status RecvData(std::vector<uint8_t>* message, absl::Duration timeout);
  // The next data message into `dst` (exactly its size, else DataLoss naming both
  // sizes). When it was announced with PostRecvsInto, or has not started to arrive
  // yet, the io thread reads the payload straight from the socket into `dst` (no
  // copy); else it is copied from the queue. Unless announced, `dst` is written only
  // during this call. A timeout while the payload is half-read fails the connection
  // (the io thread must stop writing into `dst` before this returns).
  absl::Status RecvDataInto(absl::Span<uint8_t> dst, absl::Duration timeout);
  // RecvDataInto for each of dsts in order (timeout: for each). When the last one
  // was announced, first waits until it is in place, woken only by its arrival (or
  // an error), not by every message before it.
  absl::Status RecvDataIntoAll(absl::Span<const absl::Span<uint8_t>> dsts, absl::Duration timeout);
  // RingTransport::PostRecvsInto / CancelRecvsInto for the data messages of this
  // connection: data message `skip` after the next one not yet taken goes to
  // dsts[0], and so on.
  absl::Status PostRecvsInto(size_t skip, absl::Span<const absl::Span<uint8_t>> dsts);
  void CancelRecvsInto();
  absl::Status RecvControl(std::vector<uint8_t>* message, absl::Duration timeout);
  // Frames sent from now on carry `epoch`; received frames older than it are refused.
  void SetEpoch(uint64_t epoch);
  // Frames sent from now on carry `step` (the training step they belong to).
  void SetStep(uint64_t step);
  uint64_t epoch() const;
  // The header of the last frame received whole and verified (tests, diagnostics).
  FrameHeader last_received_header() const;
  uint64_t bytes_sent() const { return bytes_sent_.load(); }
  uint64_t bytes_received() const { return bytes_received_.load(); }
  // Data messages read straight into a destination given by RecvDataInto or
  // PostRecvsInto (the rest were queued, and copied if taken with RecvDataInto).
  uint64_t messages_read_in_place() const { return in_place_.load(); }

 private:
  struct OutFrame {
    std::array<uint8_t, kFrameHeaderBytes> header;
    absl::Span<const uint8_t> payload;
    std::vector<uint8_t> owned;
    bool is_data = false;
    bool close_after = false;
    bool recycle = false;  // `owned` is a sealed-frame buffer of spare_sealed_
  };
  absl::Status Enqueue(FrameType type, uint8_t codec, absl::Span<const uint8_t> payload,
                       const uint32_t* crc32c, std::vector<uint8_t> owned, bool close_after);
  absl::Status WaitQueue(std::deque<std::vector<uint8_t>>* queue, std::vector<uint8_t>* message,
                         absl::Duration timeout, const char* what);
  // mu_ held, queue not empty: swaps its front into *message, recycles, resumes reading.
  void TakeFront(std::deque<std::vector<uint8_t>>* queue, std::vector<uint8_t>* message);
  bool QueuesFull() const;  // mu_ held: reading pauses
  absl::Status TimedOut(const char* what, absl::Duration timeout) const;  // mu_ held
  // ---- frames read, by either engine ----
  // The header in header_bytes_ arrived: checks it (IncomingFrames::Begin) and picks
  // where the payload goes. False if the connection failed.
  bool BeginFrame();
  void TakePayloadBytes(uint8_t* bytes, size_t n);  // checks/opens and counts them
  void FinishFrame();  // payload and trailer are in: verifies, then delivers the frame
  // ---- the Asio engine (tcp_connection_asio.cc) ----
  void ReadHeader();
  void OnHeader(const asio::error_code& ec);
  void ContinueFrame();  // reads what is left of the frame: payload, trailer
  void ReadPayload();
  void ReadTrailer();
  // mu_ held: passes the bytes of the next frames to write (at most
  // kMaxFramesPerWrite, ending with a close_after frame) to add(data, size) and
  // returns how many frames they are.
  template <typename AddBuffer>
  size_t NextBatch(AddBuffer add);
  // mu_ held: drops `frames` written frames; true if one asked to close after it.
  bool PopWritten(size_t frames);
  void WriteSome();
  void OnWritten(const asio::error_code& ec, size_t frames);
  absl::Status ErrorFromAsio(const asio::error_code& ec, const char* during) const;
  // mu_ held: records `status` unless an error is recorded already (FreshCopy) and
  // wakes every waiter (users, batch waiter, workers).
  void SetError(const absl::Status& status);
  void FailOnIoThread(const absl::Status& status);
  void MarkClosed();  // io thread, after closing the socket
  // Reader logic runs on the io thread, or on the reader thread once it took over:
  // errors found there go to FailOnIoThread directly or through a post.
  void FailFromReader(const absl::Status& status);
  void FailFromWorker(const absl::Status& status);  // any worker thread: posts
  void CloseSocket();      // io thread: stops the workers, closes, marks closed
  void SwitchToWorkers();  // io thread: releases the socket from Asio, starts the workers
  // ---- worker threads (LinkOptions::worker_threads) ----
  void ReaderLoop();
  void WriterLoop();
  // Blocking reads/writes on fd_; false on EOF or error, with *error set.
  bool ReadFully(uint8_t* dst, size_t n, bool payload, absl::Status* error);
  // WriteFully consumes *iovs (advances it past what was sent; the caller refills it).
  bool WriteFully(std::vector<struct iovec>* iovs, absl::Status* error);
  void StopWorkers();  // not on a worker: wakes them (shutdown) and joins them

  asio::ip::tcp::socket socket_;
  const LinkOptions options_;
  std::atomic<int> peer_rank_{-1};
  std::atomic<uint64_t> min_epoch_{0};
  std::atomic<bool> sealed_{false};
  std::atomic<uint64_t> bytes_sent_{0};
  std::atomic<uint64_t> bytes_received_{0};
  std::atomic<uint64_t> in_place_{0};

  // io-thread state
  FrameHandler handshake_handler_;
  ErrorHandler on_error_;
  // Reader state (the io thread, then the reader thread).
  IncomingFrames in_;
  uint8_t header_bytes_[kFrameHeaderBytes];
  FrameHeader header_;
  std::vector<uint8_t> payload_;
  uint8_t* read_dst_ = nullptr;  // where the payload goes: payload_ or a posted direct buffer
  size_t read_len_ = 0;
  bool read_direct_ = false;
  size_t payload_received_ = 0;
  size_t trailer_len_ = 0;  // tag bytes after the payload (sealed frames)
  std::vector<asio::const_buffer> write_buffers_;
  bool reader_threaded_ = false;  // reader logic runs on reader_ (set before it starts)

  // shared state, guarded by mu_
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::string peer_name_;
  absl::Status error_;
  bool error_reported_ = false;
  bool closed_ = false;  // the socket is closed: no operation touches user bytes any more
  std::deque<OutFrame> out_;
  bool writing_ = false;
  size_t pending_data_ = 0;
  FrameHeader last_header_;  // the last frame received whole
  // Senders take send_mu_ (before mu_, never the other way): it orders frames, and
  // sealing (outside mu_) does not hold up the reader's use of mu_.
  std::mutex send_mu_;
  OutgoingFrames out_codec_;                        // send_mu_
  std::vector<std::vector<uint8_t>> spare_sealed_;  // mu_: buffers of written sealed frames
  size_t spare_sealed_bytes_ = 0;                   // mu_: their capacity
  std::deque<std::vector<uint8_t>> data_in_;
  std::deque<std::vector<uint8_t>> control_in_;
  size_t queued_bytes_ = 0;  // payload bytes in data_in_ and control_in_
  // Capacity recycled from RecvData callers (at most max_queued_bytes in all), so a
  // steady stream of messages neither allocates, zero-fills nor page-faults.
  std::vector<std::vector<uint8_t>> spare_;
  size_t spare_bytes_ = 0;
  bool reading_paused_ = false;
  // Data messages are numbered from 0 on this connection: the io thread has begun
  // reading data_started_ of them, the user has taken data_taken_.
  uint64_t data_started_ = 0;
  uint64_t data_taken_ = 0;
  // Destinations for messages posted_base_, posted_base_ + 1, ... (PostRecvsInto, or
  // one posted by a waiting RecvDataInto). The io thread reads a message of the
  // destination's size straight into it (kWaiting -> kReading -> kDone once the
  // payload is verified); any other message goes to data_in_ (kQueued).
  struct Posted {
    enum class State { kWaiting, kReading, kDone, kQueued };
    absl::Span<uint8_t> dst;
    State state;
    bool announced;  // by PostRecvsInto (else by RecvDataInto, withdrawn on its timeout)
  };
  std::deque<Posted> posted_;
  uint64_t posted_base_ = 0;
  uint64_t direct_message_ = 0;         // io thread: number of the message read in place
  std::vector<uint8_t> copy_scratch_;   // RecvDataInto's fallback when a message was queued
  Posted* PostedFor(uint64_t message);  // mu_ held; null when not posted

  // Worker threads. They hold no reference to the connection: its destructor (or
  // CloseSocket on the io thread) stops and joins them, so it never runs on them.
  int fd_ = -1;                       // the socket's descriptor, for the workers
  std::atomic<int> info_fd_{-1};      // fd_ for KernelRtoMs: reset under join_mu_ before close
  asio::any_io_executor executor_;    // the io thread's, for the workers' posts
  bool writer_threaded_ = false;      // mu_: frames go to writer_, not the io thread
  bool switch_pending_ = false;       // mu_: the io thread hands over once not writing
  bool workers_stopping_ = false;     // mu_: workers leave their loops
  std::condition_variable write_cv_;  // writer: frames queued, or stopping
  // RecvDataIntoAll: data message batch_target_ (mu_) is done, or the link failed.
  std::condition_variable batch_cv_;
  uint64_t batch_target_ = UINT64_MAX;
  std::condition_variable read_cv_;  // reader: reading resumed, or stopping
  std::thread reader_, writer_;
  mutable std::mutex join_mu_;  // serialises StopWorkers (and KernelRtoMs with the close)
};

// Used by both engines.
template <typename AddBuffer>
inline size_t TcpConnection::NextBatch(AddBuffer add) {
  // deque::push_back keeps references to existing elements valid, so the buffers
  // stay valid while users queue more frames.
  size_t frames = 0;
  for (auto it = out_.begin(); it != out_.end() && frames < kMaxFramesPerWrite; ++it) {
    ++frames;
    add(it->header.data(), it->header.size());
    if (!it->payload.empty()) add(it->payload.data(), it->payload.size());
    if (it->close_after) break;
  }
  return frames;
}

}  // namespace rt::net
