// Command-line parsing for the netns test bed's packet tools (netem-relay, netem-probe):
// durations ("40ms", "2500us", "1.5s", "0"), loss ("0.1%" or a fraction "0.001"), byte
// counts, HOST:PORT; every malformed value ends the program with a clear error (exit 2).
#pragma once

#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <string>

#include <sched.h>
#include <sys/random.h>

namespace netem {

[[noreturn]] inline void Die(const std::string& message) {
  fprintf(stderr, "netem: %s\n", message.c_str());
  exit(2);
}

// Runs this process under SCHED_FIFO at a low real-time priority, so that a busy machine
// (the test bed shares its cores with builds) wakes it on time: a timer that fires while
// ordinary processes hold both cores would otherwise wait several milliseconds for a
// time slice, and that would add to every delay. The relay and the probes only sleep and
// copy packets; the kernel's real-time throttling (95% of a period) bounds them anyway.
// Without the privilege it says so once and runs as before.
inline void TryRealtime(const char* who) {
  sched_param param{};
  param.sched_priority = 10;
  if (sched_setscheduler(0, SCHED_FIFO, &param) != 0)
    fprintf(stderr, "%s: no real-time scheduling (%s): delays include scheduling latency\n", who,
            strerror(errno));
}

// A finite number that is the whole of `text` (no trailing characters).
inline double ParseNumber(const std::string& text, const std::string& what) {
  if (text.empty()) Die(what + ": empty value");
  char* end = nullptr;
  errno = 0;
  const double v = strtod(text.c_str(), &end);
  if (errno != 0 || end != text.c_str() + text.size() || !std::isfinite(v))
    Die(what + ": '" + text + "' is not a number");
  return v;
}

// "40ms", "2500us", "1.5s" or "0" -> nanoseconds, in [0, 10 s].
inline int64_t ParseDurationNs(const std::string& text, const std::string& what) {
  if (text == "0") return 0;
  double scale = 0;
  std::string number;
  auto ends_with = [&](const char* suffix) {
    const size_t n = strlen(suffix);
    return text.size() > n && text.compare(text.size() - n, n, suffix) == 0;
  };
  if (ends_with("us")) {
    scale = 1e3, number = text.substr(0, text.size() - 2);
  } else if (ends_with("ms")) {
    scale = 1e6, number = text.substr(0, text.size() - 2);
  } else if (ends_with("s")) {
    scale = 1e9, number = text.substr(0, text.size() - 1);
  } else {
    Die(what + ": '" + text + "' needs a unit (us, ms or s), e.g. 40ms");
  }
  const double ns = ParseNumber(number, what) * scale;
  if (ns < 0 || ns > 10e9) Die(what + ": '" + text + "' must be in 0..10s");
  return static_cast<int64_t>(std::llround(ns));
}

// "0.1%" or "0.001" -> a probability in [0, 0.5].
inline double ParseLoss(const std::string& text, const std::string& what) {
  double p = 0;
  if (!text.empty() && text.back() == '%') {
    p = ParseNumber(text.substr(0, text.size() - 1), what) / 100.0;
  } else {
    p = ParseNumber(text, what);
  }
  if (p < 0 || p > 0.5) Die(what + ": '" + text + "' must be in 0..50%");
  return p;
}

// An integer in [lo, hi].
inline int64_t ParseInt(const std::string& text, int64_t lo, int64_t hi, const std::string& what) {
  const double v = ParseNumber(text, what);
  if (v != std::floor(v) || v < static_cast<double>(lo) || v > static_cast<double>(hi))
    Die(what + ": '" + text + "' must be an integer in " + std::to_string(lo) + ".." +
        std::to_string(hi));
  return static_cast<int64_t>(v);
}

struct RelayArgs {
  std::string a, b;  // interface names
  int64_t delay_ns = 0, jitter_ns = 0;
  double loss = 0;
  size_t queue_bytes = size_t{16} << 20;
  uint64_t seed = 0;  // 0: from getrandom (see relay.cc)
  bool realtime = true;
  std::string control;  // --control: reread on SIGHUP (see relay.cc)
};

inline RelayArgs ParseRelayArgs(int argc, char** argv) {
  RelayArgs r;
  for (int i = 1; i < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "-h" || flag == "--help") {
      fprintf(stderr,
              "usage: netem-relay --a IFACE --b IFACE [--delay 20ms] [--jitter 2ms] "
              "[--loss 0.05%%] [--queue-bytes N] [--seed N] [--realtime 1|0] [--control FILE]\n");
      exit(2);
    }
    if (i + 1 >= argc) Die(flag + " needs a value");
    const std::string v = argv[i + 1];
    if (flag == "--a") {
      r.a = v;
    } else if (flag == "--b") {
      r.b = v;
    } else if (flag == "--delay") {
      r.delay_ns = ParseDurationNs(v, "--delay");
    } else if (flag == "--jitter") {
      r.jitter_ns = ParseDurationNs(v, "--jitter");
    } else if (flag == "--loss") {
      r.loss = ParseLoss(v, "--loss");
    } else if (flag == "--queue-bytes") {
      r.queue_bytes = static_cast<size_t>(ParseInt(v, 1 << 20, int64_t{1} << 32, "--queue-bytes"));
    } else if (flag == "--control") {
      r.control = v;
    } else if (flag == "--realtime") {
      r.realtime = ParseInt(v, 0, 1, "--realtime") == 1;
    } else if (flag == "--seed") {
      r.seed = static_cast<uint64_t>(ParseInt(v, 0, int64_t{1} << 52, "--seed"));
    } else {
      Die("unknown flag '" + flag + "' (see --help)");
    }
  }
  if (r.a.empty() || r.b.empty() || r.a == r.b) Die("--a and --b must name two interfaces");
  if (r.a.size() >= 16 || r.b.size() >= 16) Die("interface names have at most 15 characters");
  if (r.jitter_ns > 2 * r.delay_ns)
    Die("--jitter must be at most twice --delay (a packet's delay is delay +- jitter/2)");
  // Random, not the clock: relays started in the same second must not draw the same
  // losses. 52 bits, so that --seed can replay it.
  while (r.seed == 0) {
    uint64_t v = 0;
    if (getrandom(&v, sizeof(v), 0) != static_cast<ssize_t>(sizeof(v)))
      Die(std::string("getrandom: ") + strerror(errno));
    r.seed = v & ((uint64_t{1} << 52) - 1);
  }
  return r;
}

}  // namespace netem
