// `ringtrain bench compute|allreduce|codec|transfer`: dispatches to the benchmark named by
// the first positional argument. Each benchmark lives in its own bench_<kind>.cc;
// all of them print a human table and, last, one JSON line (DESIGN).
#include <cstdio>

#include "cli/bench_kinds.h"
#include "cli/subcommand.h"

namespace rt::cli {
namespace {

int RunBench(const std::vector<std::string>& positional) {
  if (positional.empty()) {
    std::fprintf(stderr,
                 "ringtrain bench: say which benchmark: compute, allreduce, codec or transfer\n");
    return 2;
  }
  const std::string& kind = positional[0];
  std::vector<std::string> rest(positional.begin() + 1, positional.end());
  if (kind == "compute") return RunBenchCompute(rest);
  if (kind == "allreduce") return RunBenchAllreduce(rest);
  if (kind == "codec") return RunBenchCodec(rest);
  if (kind == "transfer") return RunBenchTransfer(rest);
  std::fprintf(stderr,
               "ringtrain bench: unknown benchmark '%s' (compute, allreduce, codec, transfer)\n",
               kind.c_str());
  return 2;
}

std::vector<std::string> AllBenchFlags() {
  std::vector<std::string> flags;
  for (const auto& list : {BenchComputeFlagNames(), BenchAllreduceFlagNames(),
                           BenchCodecFlagNames(), BenchTransferFlagNames()}) {
    for (const std::string& f : list) {
      bool seen = false;
      for (const std::string& g : flags) seen = seen || g == f;
      if (!seen) flags.push_back(f);
    }
  }
  return flags;
}

}  // namespace

const Subcommand& BenchSubcommand() {
  static const Subcommand sub = [] {
    Subcommand s{
        "bench",
        "Measure compute, allreduce, codec or state-transfer speed (human table, then one JSON "
        "line)",
        "ringtrain bench compute   [model flags] [--steps N] [--profile]\n"
        "ringtrain bench allreduce --hosts FILE --self HOST:PORT [--size N] [--compress ...]\n"
        "ringtrain bench codec     [--size N] [--compress ...]\n"
        "ringtrain bench transfer  --hosts FILE --self HOST:PORT [--size FLOATS] [--iters N]",
        AllBenchFlags(), &RunBench};
    // bench compute times a few steps; --steps is a training length elsewhere.
    s.flag_defaults = {{"steps", "5"}};
    s.runs_openmp = true;  // bench compute: the model and AdamW
    return s;
  }();
  return sub;
}

}  // namespace rt::cli
