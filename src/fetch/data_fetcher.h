// FetchMissing: the client side of data fetching. Pulls what this peer's LocalData
// lacks (the manifest, the tokenizer, the shards) from the other peers of the hosts
// file over authenticated links (kDataFetchChannel), writing through PartialFile so a
// fetch cut by kill -9 resumes where it stopped.
//
// Sources are tried in ring order backwards from this peer (its predecessor first,
// then the one before, ...): when every peer fetches at once from one holder, each
// pulls from its predecessor, which relays what it receives (data_server.h), so the
// bytes travel the ring once, as a pipeline, instead of the holder's uplink carrying
// one copy per peer. A source whose manifest differs is not used; a file a source
// refuses (corrupt there) or that fails its check here is named in a warning and
// fetched from the next source; such refusals expire after `refusal_ttl` (a relay
// whose own copy started over has it again soon).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "fetch/local_data.h"
#include "net/hosts_file.h"

namespace rt::fetch {

struct FetcherOptions {
  std::vector<net::HostEntry> hosts;
  int self_rank = -1;
  std::string secret;
  bool encrypt = false;
  std::string cluster_id;
  absl::Duration wait = absl::Seconds(120);         // for the whole fetch
  absl::Duration dial_timeout = absl::Seconds(3);   // per source and attempt
  absl::Duration recv_timeout = absl::Seconds(40);  // silence from a source mid-file
  absl::Duration refusal_ttl = absl::Seconds(10);
  // Polled at least every 250 ms while waiting (dials, receives, pauses between
  // attempts): once it returns true the fetch gives up at once with Cancelled, keeping
  // every checked byte for the next run (PartialFile). Empty: never.
  std::function<bool()> stop;
};

struct FetchReport {
  uint64_t bytes_fetched = 0;  // received and kept this run
  int files_fetched = 0;
  double seconds = 0;
  std::map<std::string, uint64_t> bytes_from;  // by source endpoint
  std::vector<std::string> refusals;           // "train-00001.bin from 127.0.0.1:35001: ..."
};

// Returns once `data` is complete (its manifest written), DeadlineExceeded after
// options.wait naming each source's last problem, or Cancelled soon after options.stop
// says so (naming what is kept).
absl::Status FetchMissing(const FetcherOptions& options, LocalData& data, FetchReport* report);

}  // namespace rt::fetch
