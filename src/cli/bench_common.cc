// Small pieces every `ringtrain bench <kind>` shares (see bench_common.h).
#include "cli/bench_common.h"

#include <sys/resource.h>

#include <cstdint>

#include "absl/strings/str_format.h"
#include "absl/types/span.h"
#include "collective/small_collectives.h"
#include "core/status_macros.h"

namespace rt::cli {

absl::Status BenchBarrier(net::RingTransport* ring, absl::Duration timeout) {
  uint64_t one[1] = {1};
  RETURN_IF_ERROR(collective::AllreduceSumU64(ring, absl::MakeSpan(one), timeout));
  if (one[0] != static_cast<uint64_t>(ring->size())) {
    return absl::InternalError(
        absl::StrFormat("barrier counted %d peers, expected %d", one[0], ring->size()));
  }
  return absl::OkStatus();
}

double PeakRssMb() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<double>(ru.ru_maxrss) / 1024.0;  // ru_maxrss is in KiB on Linux
}

}  // namespace rt::cli
