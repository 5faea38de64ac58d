// Codec speed calibration for the planner (codec_planner.h): a short measurement of
// top-k selection, sparse encode/decode, zstd and bf16 rounding on this CPU (one
// thread), on a deterministic gradient-like buffer; and the agreement step that makes
// every peer plan from the same figures.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "collective/codec_planner.h"
#include "net/ring_transport.h"

namespace rt::collective {

struct CalibrationOptions {
  size_t floats = size_t{1} << 20;  // calibration buffer (4 MiB of fp32)
  std::vector<double> densities = {0.1, 0.03, 0.01, 0.003, 0.001};  // profiles to measure
  int zstd_level = 1;  // 0 = no zstd figures (the planner will not use zstd)
  int repeats = 2;     // best of `repeats` for every timing
  uint64_t seed = 1;
};

// Takes about 0.2 s per 1M floats (Release, 5 densities, zstd, 2 repeats; measured on
// a busy 2-vCPU host).
CodecSpeeds CalibrateCodecs(const CalibrationOptions& options);

// Every peer passes its own figures; every peer gets the same: the slowest peer's
// speed for each rate (the ring waits for the slowest) and the largest bytes per
// entry for each density. Densities and zstd level must match on all peers.
absl::StatusOr<CodecSpeeds> AgreeCodecSpeeds(net::RingTransport& ring, const CodecSpeeds& mine,
                                             absl::Duration timeout = absl::Seconds(60));

}  // namespace rt::collective
