// Per-bucket codec dispatch with error feedback.
#include "collective/bucket_exchange.h"

#include "absl/strings/str_format.h"
#include "collective/block_quant.h"
#include "collective/quantized_allreduce.h"
#include "collective/sparse_allreduce.h"
#include "collective/sparse_codec.h"
#include "core/clock.h"
#include "core/status_macros.h"

namespace rt::collective {

BucketExchange::BucketExchange(size_t length, std::vector<IndexRange> dense_ranges)
    : length_(length), dense_ranges_(std::move(dense_ranges)) {
  size_t dense = 0;
  for (const IndexRange& r : dense_ranges_) dense += r.end - r.begin;
  sparse_count_ = length_ - dense;
}

void BucketExchange::AddResidualTo(absl::Span<float> grads) {
  if (residual_.size() == 0) return;
  for (size_t i = 0; i < length_; ++i) grads[i] += residual_[i];
  pending_ = Pending::kFolded;
}

void BucketExchange::Commit() {
  if (pending_ == Pending::kFolded) residual_.Zero();  // it went out with the dense sum
  pending_ = Pending::kNothing;
}

void BucketExchange::Rollback() {
  if (pending_ == Pending::kSelected) {
    for (size_t j = 0; j < selection_.indices.size(); ++j) {
      residual_[selection_.indices[j]] += Bf16ToFloat(selection_.values[j]);
    }
  }
  pending_ = Pending::kNothing;
}

absl::Status BucketExchange::RunDense(net::RingTransport* ring, absl::Span<float> grads,
                                      const AllreduceOptions& options, ExchangeStats* stats,
                                      bool fold_residual) {
  if (fold_residual) AddResidualTo(grads);
  Stopwatch watch;
  AllreduceOptions fp32 = options;
  fp32.wire = WireFormat::kFp32;
  RingAllreduce op(ring, grads, fp32);
  RETURN_IF_ERROR(op.run());
  stats->bytes_sent += op.bytes_sent();
  stats->exchange_ms += watch.ElapsedMs();
  stats->codec_used = fold_residual ? "none" : "refresh";
  return absl::OkStatus();
}

absl::Status BucketExchange::Run(net::RingTransport* ring, absl::Span<float> grads,
                                 const CodecSpec& spec, int64_t step, int64_t topk_warmup_steps,
                                 int64_t topk_refresh_every, const AllreduceOptions& options,
                                 ExchangeStats* stats) {
  if (grads.size() != length_) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "bucket exchange: got %d floats for a bucket of %d", grads.size(), length_));
  }
  Commit();  // the previous Run is final
  const int n = ring->size();
  if (spec.kind == CodecKind::kNone || n == 1) return RunDense(ring, grads, options, stats);
  if (residual_.size() != length_) residual_.Resize(length_);

  if (spec.kind == CodecKind::kBf16) {
    Stopwatch watch;
    for (size_t i = 0; i < length_; ++i) grads[i] += residual_[i];
    AllreduceOptions bf16 = options;
    bf16.wire = WireFormat::kBf16;
    RingAllreduce op(ring, grads, bf16, residual_.span());
    RETURN_IF_ERROR(op.run());
    stats->bytes_sent += op.bytes_sent();
    stats->exchange_ms += watch.ElapsedMs();
    stats->codec_used = "bf16";
    return absl::OkStatus();
  }

  if (spec.kind == CodecKind::kInt8 || spec.kind == CodecKind::kInt4) {
    Stopwatch watch;
    for (size_t i = 0; i < length_; ++i) grads[i] += residual_[i];
    QuantizedAllreduceOptions q;
    q.bits = spec.kind == CodecKind::kInt8 ? 8 : 4;
    q.chunk_values = std::max<size_t>(kQuantBlock, options.chunk_bytes);  // ~1 byte a value
    q.timeout = options.timeout;
    RETURN_IF_ERROR(QuantizedRingAllreduce(ring, grads, residual_.span(), q, &stats->bytes_sent));
    stats->exchange_ms += watch.ElapsedMs();
    stats->codec_used = spec.ToString();
    return absl::OkStatus();
  }

  const double density = TopKDensityAt(step, spec.density, topk_warmup_steps);
  if (!SparsePays(n, density)) return RunDense(ring, grads, options, stats);
  if (IsTopKRefreshStep(step, topk_warmup_steps, topk_refresh_every)) {
    return RunDense(ring, grads, options, stats, /*fold_residual=*/false);
  }
  Stopwatch watch;
  SelectTopKWithFeedback(grads, residual_.span(), TopKCount(sparse_count_, density), dense_ranges_,
                         &selection_, &topk_scratch_);
  pending_ = Pending::kSelected;
  EncodeSparse(selection_, static_cast<uint32_t>(length_), spec.zstd_level, &encoded_);
  stats->encode_ms += watch.ElapsedMs();
  stats->entries_sent += selection_.indices.size();
  watch.Restart();
  RETURN_IF_ERROR(SparseAllgatherSum(ring, encoded_, grads, options.timeout, &stats->bytes_sent));
  stats->exchange_ms += watch.ElapsedMs();
  CodecSpec used = spec;
  used.density = density;
  stats->codec_used = used.ToString();
  return absl::OkStatus();
}

}  // namespace rt::collective
