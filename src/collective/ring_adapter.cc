// Probe, order, re-form: the step-boundary sequence of link probing in one call.
#include "collective/ring_adapter.h"

#include <algorithm>
#include <string>

#include "absl/strings/str_format.h"
#include "core/log.h"
#include "core/status_macros.h"

namespace rt::collective {

absl::StatusOr<ReorderResult> ProbeAndReorder(net::TcpRing& current, uint64_t probe_index,
                                              const ReorderOptions& options) {
  ReorderResult result;
  ProbeOptions probe = options.probe;
  probe.peers = current.order();
  std::sort(probe.peers.begin(), probe.peers.end());
  probe.channel = ProbeChannel(probe_index, options.salt);
  ASSIGN_OR_RETURN(result.matrix, ProbeLinks(*current.node(), current, probe, &result.probe_stats));
  ASSIGN_OR_RETURN(result.plan, PlanRingOrder(result.matrix));
  LogInfo("%s", result.plan.description);

  const RingLinkSummary now = SummarizeRing(result.matrix, current.order());
  const bool same = result.plan.host_order == current.order();
  const RingOrder current_classed = ClassedRingOrder(result.matrix, current.order());
  const bool better_class =
      result.plan.classed.bottleneck_bps > current_classed.bottleneck_bps ||
      (result.plan.classed.bottleneck_bps == current_classed.bottleneck_bps &&
       result.plan.classed.bottleneck_links < current_classed.bottleneck_links);
  const bool worth =
      !same && (now.bottleneck_bps <= 0 || better_class ||
                result.plan.bottleneck_bps > now.bottleneck_bps * (1 + options.min_gain));
  if (!worth || !options.reform) {
    if (!same) {
      LogInfo("keeping the current ring (%s): %s", DescribeRing(result.matrix, current.order()),
              !worth ? absl::StrFormat("not %.0f%% slower than the best order, and no more "
                                       "links in its slowest class",
                                       options.min_gain * 100)
                     : std::string("re-ordering is off"));
    }
    result.links = now;
    return result;
  }
  ASSIGN_OR_RETURN(result.ring, net::TcpRing::Form(current.node(), result.plan.host_order,
                                                   ReorderChannel(probe_index, options.salt),
                                                   options.form_wait));
  // The re-ordered ring belongs to the same view: its frames carry that epoch and it
  // refuses older ones (DESIGN invariant 4), like the ring it replaces.
  result.ring->SetEpoch(current.epoch());
  LogInfo("ring re-formed: bottleneck %.1f -> %.1f MB/s", now.bottleneck_bps / 1e6,
          result.plan.bottleneck_bps / 1e6);
  result.links = SummarizeRing(result.matrix, result.plan.host_order);
  return result;
}

}  // namespace rt::collective
