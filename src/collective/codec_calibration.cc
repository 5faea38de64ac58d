// Codec calibration: times the real codec kernels on a gradient-like buffer.
#include "collective/codec_calibration.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <random>

#include "absl/strings/str_format.h"
#include "collective/bf16_feedback.h"
#include "collective/small_collectives.h"
#include "collective/sparse_codec.h"
#include "collective/topk_select.h"
#include "core/aligned_buffer.h"
#include "core/clock.h"
#include "core/status_macros.h"

namespace rt::collective {
namespace {

// Median wall time (s) of `repeats` runs of fn; `reset` runs untimed before each.
double MedianOf(int repeats, const std::function<void()>& reset, const std::function<void()>& fn) {
  std::vector<double> times;
  for (int i = 0; i < std::max(1, repeats); ++i) {
    if (reset) reset();
    Stopwatch watch;
    fn();
    times.push_back(watch.ElapsedSeconds());
  }
  std::sort(times.begin(), times.end());
  return std::max(times[times.size() / 2], 1e-9);
}

// Gradient-like values: Gaussian with a per-block scale spanning 3 decades, as
// gradients of different tensors do (magnitudes matter for selection thresholds).
void FillGradientLike(absl::Span<float> g, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> log_scale(-3.0f, 0.0f);
  float scale = 1;
  for (size_t i = 0; i < g.size(); ++i) {
    if (i % 4096 == 0) scale = std::pow(10.0f, log_scale(rng));
    g[i] = normal(rng) * scale * 1e-3f;
  }
}

// Flattened CodecSpeeds for the allgather (doubles bit-copied).
std::vector<double> Flatten(const CodecSpeeds& s) {
  std::vector<double> v = {s.select_bps,
                           s.encode_eps,
                           s.decode_eps,
                           s.bf16_bps,
                           s.add_bps,
                           double(s.zstd_level),
                           s.zstd_compress_bps,
                           s.zstd_decompress_bps,
                           double(s.profiles.size())};
  for (const auto& p : s.profiles) {
    v.push_back(p.density);
    v.push_back(p.raw_bytes_per_entry);
    v.push_back(p.zstd_bytes_per_entry);
    v.push_back(p.select_bps);
  }
  return v;
}

constexpr size_t kFixed = 9;
constexpr size_t kPerProfile = 4;

}  // namespace

CodecSpeeds CalibrateCodecs(const CalibrationOptions& o) {
  const size_t n = std::max<size_t>(o.floats, 4096);
  AlignedBuffer<float> grads(n), residual(n), bucket(n), other(n);
  FillGradientLike(grads.span(), o.seed);
  FillGradientLike(other.span(), o.seed + 1);
  CodecSpeeds s;
  s.zstd_level = o.zstd_level;
  const double bytes = 4.0 * static_cast<double>(n);

  std::vector<bf16_t> q(n);
  s.bf16_bps = bytes / MedianOf(o.repeats, nullptr, [&] {
                 RoundToBf16WithFeedback(grads.data(), q.data(), residual.data(), n);
               });
  s.add_bps = bytes / MedianOf(o.repeats, nullptr, [&] {
                for (size_t i = 0; i < n; ++i) bucket[i] += other[i];
              });

  double select_bps = 1e30, encode_eps = 1e30, decode_eps = 1e30;
  double zc_bps = 1e30, zd_bps = 1e30;
  SparseVector sv, decoded;
  std::vector<uint8_t> raw, packed;
  // Kept across densities and repeats, as a bucket keeps its own in an exchange, so
  // that the selection is timed as it runs there (no fresh working memory per call).
  TopKScratch scratch;
  for (double d : o.densities) {
    const size_t k = TopKCount(n, d);
    auto zero_residual = [&] { std::memset(residual.data(), 0, n * sizeof(float)); };
    const double select_d =
        bytes / MedianOf(o.repeats, zero_residual, [&] {
          SelectTopKWithFeedback(grads.span(), residual.span(), k, {}, &sv, &scratch);
        });
    select_bps = std::min(select_bps, select_d);
    const double e = static_cast<double>(sv.indices.size());
    const double t_raw =
        MedianOf(o.repeats, nullptr, [&] { EncodeSparse(sv, static_cast<uint32_t>(n), 0, &raw); });
    encode_eps = std::min(encode_eps, e / t_raw);
    auto decode_and_add = [&](const std::vector<uint8_t>& msg) {
      (void)DecodeSparse(msg, static_cast<uint32_t>(n), &decoded);
      for (size_t j = 0; j < decoded.indices.size(); ++j) {
        bucket[decoded.indices[j]] += Bf16ToFloat(decoded.values[j]);
      }
    };
    const double t_dec = MedianOf(o.repeats, nullptr, [&] { decode_and_add(raw); });
    decode_eps = std::min(decode_eps, e / t_dec);
    DensityProfile p;
    p.density = d;
    p.select_bps = select_d;
    p.raw_bytes_per_entry = static_cast<double>(raw.size()) / std::max(1.0, e);
    p.zstd_bytes_per_entry = p.raw_bytes_per_entry;
    if (o.zstd_level > 0) {
      const double t_z = MedianOf(o.repeats, nullptr, [&] {
        EncodeSparse(sv, static_cast<uint32_t>(n), o.zstd_level, &packed);
      });
      const double t_zdec = MedianOf(o.repeats, nullptr, [&] { decode_and_add(packed); });
      p.zstd_bytes_per_entry = static_cast<double>(packed.size()) / std::max(1.0, e);
      zc_bps = std::min(zc_bps, static_cast<double>(raw.size()) / std::max(1e-9, t_z - t_raw));
      zd_bps = std::min(zd_bps, static_cast<double>(raw.size()) / std::max(1e-9, t_zdec - t_dec));
    }
    s.profiles.push_back(p);
  }
  if (!o.densities.empty()) {
    s.select_bps = select_bps;
    s.encode_eps = encode_eps;
    s.decode_eps = decode_eps;
  }
  if (o.zstd_level > 0 && !o.densities.empty()) {
    s.zstd_compress_bps = zc_bps;
    s.zstd_decompress_bps = zd_bps;
  }
  return s;
}

absl::StatusOr<CodecSpeeds> AgreeCodecSpeeds(net::RingTransport& ring, const CodecSpeeds& mine,
                                             absl::Duration timeout) {
  const std::vector<double> flat = Flatten(mine);
  ASSIGN_OR_RETURN(auto all,
                   AllgatherBytes(&ring,
                                  absl::MakeConstSpan(reinterpret_cast<const uint8_t*>(flat.data()),
                                                      flat.size() * sizeof(double)),
                                  timeout));
  std::vector<double> agreed = flat;
  for (size_t p = 0; p < all.size(); ++p) {
    if (all[p].size() != flat.size() * sizeof(double)) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "codec calibration: ring position %d measured %d densities, this peer %d "
          "(all peers must calibrate the same ladder)",
          p,
          all[p].size() / sizeof(double) < kFixed ? 0 : (all[p].size() / 8 - kFixed) / kPerProfile,
          mine.profiles.size()));
    }
    std::vector<double> v(flat.size());
    std::memcpy(v.data(), all[p].data(), all[p].size());
    if (v[5] != flat[5]) {
      return absl::InvalidArgumentError(
          absl::StrFormat("codec calibration: ring position %d used zstd level %g, this peer %g", p,
                          v[5], flat[5]));
    }
    for (size_t i = 0; i < v.size(); ++i) {
      if (!std::isfinite(v[i]) || v[i] < 0) {
        return absl::DataLossError(
            absl::StrFormat("codec calibration: ring position %d sent a bad figure", p));
      }
      if (i < kFixed) {
        if (i != 5 && i != 8) agreed[i] = std::min(agreed[i], v[i]);
      } else if ((i - kFixed) % kPerProfile == 0) {
        if (v[i] != flat[i]) {
          return absl::InvalidArgumentError(absl::StrFormat(
              "codec calibration: ring position %d measured density %g where this peer "
              "measured %g",
              p, v[i], flat[i]));
        }
      } else if ((i - kFixed) % kPerProfile == 3) {
        agreed[i] = std::min(agreed[i], v[i]);  // a speed: the slowest
      } else {
        agreed[i] = std::max(agreed[i], v[i]);  // a size: the largest
      }
    }
  }
  CodecSpeeds s = mine;
  s.select_bps = agreed[0];
  s.encode_eps = agreed[1];
  s.decode_eps = agreed[2];
  s.bf16_bps = agreed[3];
  s.add_bps = agreed[4];
  s.zstd_compress_bps = agreed[6];
  s.zstd_decompress_bps = agreed[7];
  for (size_t j = 0; j < s.profiles.size(); ++j) {
    s.profiles[j].raw_bytes_per_entry = agreed[kFixed + kPerProfile * j + 1];
    s.profiles[j].zstd_bytes_per_entry = agreed[kFixed + kPerProfile * j + 2];
    s.profiles[j].select_bps = agreed[kFixed + kPerProfile * j + 3];
  }
  return s;
}

}  // namespace rt::collective
