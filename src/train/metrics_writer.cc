// JSONL step metrics.
#include "train/metrics_writer.h"

#include <cerrno>
#include <cmath>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace rt::train {
namespace {

std::string Number(double x) {
  if (!std::isfinite(x)) return "null";
  return absl::StrFormat("%.9g", x);
}

}  // namespace

std::string StepMetricsJson(const StepMetrics& m) {
  std::string s = absl::StrFormat(
      "{\"step\":%d,\"loss\":%s,\"lr\":%s,\"tokens\":%d,\"tokens_per_s\":%s,\"step_ms\":%s,"
      "\"compute_ms\":%s,\"comm_ms\":%s,\"bytes_sent\":%u,\"grad_norm\":%s,\"peers\":%d,"
      "\"rank\":%d,\"epoch\":%u,\"leader\":%d,\"param_hash\":\"%s\"",
      m.step, Number(m.loss), Number(m.lr), m.tokens, Number(m.tokens_per_s), Number(m.step_ms),
      Number(m.compute_ms), Number(m.comm_ms), m.bytes_sent, Number(m.grad_norm), m.peers, m.rank,
      m.epoch, m.leader, m.param_hash);
  // Load balancing: this peer's share of the step and its wait for the slowest peer.
  if (m.time_s > 0) absl::StrAppend(&s, ",\"time\":", absl::StrFormat("%.3f", m.time_s));
  absl::StrAppend(&s, ",\"slots\":", m.slots, ",\"wait_ms\":", Number(m.wait_ms));
  // Checkpoints: failed writes in a row (0 when the last one worked; trainer.h).
  absl::StrAppend(&s, ",\"ckpt_failures\":", m.ckpt_failures,
                  ",\"ckpt_wait_ms\":", Number(m.ckpt_wait_ms));
  if (m.rss_mb >= 0) absl::StrAppend(&s, ",\"rss_mb\":", absl::StrFormat("%.1f", m.rss_mb));
  if (m.outer_step >= 0) absl::StrAppend(&s, ",\"outer_step\":", m.outer_step);
  if (m.outer_ms >= 0) {
    absl::StrAppend(&s, ",\"outer_ms\":", Number(m.outer_ms), ",\"outer_bytes\":", m.outer_bytes,
                    ",\"pseudo_grad_norm\":", Number(m.pseudo_grad_norm));
  }
  if (m.val_loss) absl::StrAppend(&s, ",\"val_loss\":", Number(*m.val_loss));
  if (m.val_bpb) absl::StrAppend(&s, ",\"val_bpb\":", Number(*m.val_bpb));
  s += "}";
  return s;
}

absl::StatusOr<MetricsWriter> MetricsWriter::Open(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "a");
  if (f == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot open metrics file ", path, ": ", std::strerror(errno)));
  }
  return MetricsWriter(f, path);
}

MetricsWriter::MetricsWriter(MetricsWriter&& o) noexcept
    : file_(std::exchange(o.file_, nullptr)), path_(std::move(o.path_)) {}

MetricsWriter::~MetricsWriter() {
  if (file_ != nullptr) std::fclose(file_);
}

absl::Status MetricsWriter::Write(const StepMetrics& m) {
  std::string line = StepMetricsJson(m) + "\n";
  if (std::fwrite(line.data(), 1, line.size(), file_) != line.size() || std::fflush(file_) != 0) {
    return absl::InternalError(
        absl::StrCat("cannot write metrics file ", path_, ": ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

}  // namespace rt::train
