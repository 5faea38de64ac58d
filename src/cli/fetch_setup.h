// From the ring flags to the options of the data phase (fetch/fetch_phase.h), shared
// by `fetch-data` and `train`: the hosts file, this peer's identity, the secret and
// --encrypt resolved as the ring resolves them, and --fetch-wait.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "fetch/fetch_phase.h"
#include "net/ring_setup.h"

namespace rt::cli {

// The cluster id data-fetch links use: train's, so that a peer fetching (in `train` or
// `fetch-data`) reaches peers serving from either.
inline constexpr char kTrainClusterId[] = "ringtrain-train";

absl::StatusOr<fetch::FetchPhaseOptions> FetchPhaseOptionsFrom(const net::RingSetup& setup,
                                                               const std::string& data_dir);

// Prints (logs) what a fetch did: bytes, time, rate, sources, refusals.
void LogFetchReport(const fetch::FetchReport& report);

}  // namespace rt::cli
