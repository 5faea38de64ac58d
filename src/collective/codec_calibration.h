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
  // Calibration buffer. Speeds depend on the size: selection at density 0.001 runs at
  // 0.6 GB/s on 1M floats but 1.5 on 16M (16M at 0.01: 1.1; so a 1M-float calibration
  // ranks the densities the wrong way round). Callers pass their real bucket size,
  // capped at kMaxCalibrationFloats (memory and time; beyond the caches speeds no longer
  // change much with size).
  size_t floats = size_t{1} << 20;
  std::vector<double> densities = {0.1, 0.03, 0.01, 0.003, 0.001};  // profiles to measure
  int zstd_level = 1;  // 0 = no zstd figures (the planner will not use zstd)
  // Median of `repeats` for every timing: peers calibrate at the same time, as they
  // run their exchanges, so a typical run reflects this peer's real share of a CPU that
  // others use too (a best of runs catches the moments another peer was idle).
  int repeats = 3;
  uint64_t seed = 1;
};

inline constexpr size_t kMaxCalibrationFloats = size_t{16} << 20;

// Takes about 0.2 s per 1M floats (Release, 5 densities, zstd, 2 repeats; measured on
// a busy 2-vCPU host).
CodecSpeeds CalibrateCodecs(const CalibrationOptions& options);

// Every peer passes its own figures; every peer gets the same: the slowest peer's
// speed for each rate (the ring waits for the slowest) and the largest bytes per
// entry for each density. Densities and zstd level must match on all peers.
absl::StatusOr<CodecSpeeds> AgreeCodecSpeeds(net::RingTransport& ring, const CodecSpeeds& mine,
                                             absl::Duration timeout = absl::Seconds(60));

}  // namespace rt::collective
