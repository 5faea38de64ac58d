// Which running peers use a checkpoint directory: a shared --ckpt-dir (NFS, or a local
// ring on one machine) is detected even when --ckpt-shared was forgotten.
//
// Every peer of a ring with a --ckpt-dir holds a PeerMarker for its whole life: the file
// <ckpt_dir>/.peer-<name> (name = the peer's hosts-file endpoint, '/' and '%' written as
// %XX), which records who wrote it and carries an open file description lock (fcntl
// F_OFD_SETLK) held until the marker is destroyed or the process dies. Another peer
// that finds a marker whose lock is held knows that this live peer writes into the same
// directory. A marker whose lock is free is a leftover (a dead peer, or a directory
// copied from another machine) and says nothing. Readers of checkpoints ignore these
// files (they are not step-* directories).
//
// Thread-safety: const methods may be called from any thread.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace rt::ckpt {

class PeerMarker {
 public:
  // Creates ckpt_dir if needed and writes and locks this peer's marker. If another live
  // process holds a marker of the same name (the same peer started twice on one
  // directory), FailedPrecondition naming it. I/O errors name the path.
  static absl::StatusOr<std::unique_ptr<PeerMarker>> Create(const std::string& ckpt_dir,
                                                            const std::string& peer_name);
  ~PeerMarker();  // unlocks and removes the marker
  PeerMarker(const PeerMarker&) = delete;
  PeerMarker& operator=(const PeerMarker&) = delete;

  // The names of the other peers whose markers in the directory are held now (sorted).
  std::vector<std::string> LiveOthers() const;
  // True if `peer_name` (not this peer) holds a live marker in the directory.
  bool IsLive(const std::string& peer_name) const;

  const std::string& dir() const { return dir_; }

 private:
  PeerMarker(std::string dir, std::string name, std::string path, int fd)
      : dir_(std::move(dir)), name_(std::move(name)), path_(std::move(path)), fd_(fd) {}
  std::string dir_, name_, path_;
  int fd_;
};

// The marker file name of a peer (".peer-" + escaped name), and its inverse ("" if
// `file_name` is not a marker's).
std::string PeerMarkerFileName(const std::string& peer_name);
std::string PeerNameOfMarker(const std::string& file_name);

}  // namespace rt::ckpt
