// `ringtrain bench codec`: speed and size of a gradient codec on a gradient-like
// buffer (Gaussian core, heavy tails), single thread: selection (top-k with error
// feedback / bf16 rounding with error feedback), encoding (bit packing, zstd) and
// decoding (including the scatter-add into a dense bucket). Human table, then one
// JSON line: size, codec, select_GBps, encode_GBps, decode_GBps, bytes_in,
// bytes_out, ratio. GB/s are gradient bytes (4 per element) per second.
#include <zstd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <functional>
#include <utility>

#include "absl/flags/flag.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "cli/bench_kinds.h"
#include "cli/bench_size_flag.h"
#include "cli/common_flags.h"
#include "collective/bf16_feedback.h"
#include "collective/codec_spec.h"
#include "collective/sparse_codec.h"
#include "collective/topk_select.h"
#include "core/aligned_buffer.h"
#include "core/bf16.h"
#include "core/clock.h"
#include "core/cpu_features.h"

ABSL_FLAG(std::string, size, "124M",
          "bench: elements in the buffer (suffix K, M, G = 1e3, 1e6, 1e9)");

namespace rt::cli {

absl::StatusOr<int64_t> ParseElementCount(const std::string& text) {
  std::string digits = text;
  int64_t scale = 1;
  if (!digits.empty()) {
    switch (digits.back()) {
      case 'K':
      case 'k':
        scale = 1000;
        break;
      case 'M':
      case 'm':
        scale = 1000000;
        break;
      case 'G':
      case 'g':
        scale = 1000000000;
        break;
      default:
        break;
    }
    if (scale != 1) digits.pop_back();
  }
  int64_t value = 0;
  if (!absl::SimpleAtoi(digits, &value) || value <= 0 || value > (int64_t{1} << 40) / scale) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "--size '%s' is not a positive element count (e.g. 1000000 or 124M)", text));
  }
  return value * scale;
}

namespace {

using collective::CodecKind;
using collective::CodecSpec;

// Gradient-like values: a Gaussian-ish core (sum of 4 uniforms) scaled by a
// log-uniform factor over ~2.6 decades, so magnitudes have heavy tails.
void FillGradientLike(absl::Span<float> g) {
  uint64_t s = 0x2545F4914F6CDD1Dull;
  auto next = [&s] {
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    return s;
  };
  for (float& x : g) {
    const uint64_t r = next(), q = next();
    const float u = ((r & 0xffff) + ((r >> 16) & 0xffff) + ((r >> 32) & 0xffff) + (r >> 48)) *
                        (1.0f / 65536.0f) -
                    2.0f;
    x = u * 1e-3f * std::exp(6.0f * ((q & 0xffffff) * (1.0f / 16777216.0f)) - 3.0f);
  }
}

double ThreadCpuSeconds() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

// Wall and CPU seconds of a stage: best of the repetitions. On a shared machine
// the CPU time is the better estimate of the codec's own speed.
struct Timing {
  double wall_s = 0, cpu_s = 0;
};

// `setup` runs untimed before each repetition.
Timing Best(int reps, const std::function<void()>& setup, const std::function<void()>& fn) {
  Timing best{1e300, 1e300};
  for (int r = 0; r < reps; ++r) {
    setup();
    const double cpu0 = ThreadCpuSeconds();
    Stopwatch watch;
    fn();
    best.wall_s = std::min(best.wall_s, watch.ElapsedSeconds());
    best.cpu_s = std::min(best.cpu_s, ThreadCpuSeconds() - cpu0);
  }
  return best;
}

struct Result {
  Timing select, encode, decode;
  uint64_t bytes_out = 0;
};

Result BenchTopK(absl::Span<const float> grads, const CodecSpec& spec, int reps) {
  const size_t n = grads.size();
  AlignedBuffer<float> residual(n), dense(n);
  collective::SparseVector sel, back;
  std::vector<uint8_t> bytes;
  const size_t k = collective::TopKCount(n, spec.density);
  Result r;
  r.select = Best(
      reps, [&] { residual.Zero(); },
      [&] { collective::SelectTopKWithFeedback(grads, residual.span(), k, {}, &sel); });
  r.encode = Best(
      reps, [] {},
      [&] { collective::EncodeSparse(sel, static_cast<uint32_t>(n), spec.zstd_level, &bytes); });
  r.bytes_out = bytes.size();
  r.decode = Best(
      reps, [&] { dense.Zero(); },
      [&] {
        absl::Status s = collective::DecodeSparse(bytes, static_cast<uint32_t>(n), &back);
        if (!s.ok()) std::fprintf(stderr, "decode failed: %s\n", s.ToString().c_str());
        for (size_t j = 0; j < back.indices.size(); ++j) {
          dense[back.indices[j]] += Bf16ToFloat(back.values[j]);
        }
      });
  return r;
}

// Dense codecs: bf16 = rounding with error feedback (selection), optional zstd of
// the split byte planes (encoding); none = fp32 as is, optional zstd.
Result BenchDense(absl::Span<const float> grads, const CodecSpec& spec, int reps) {
  const size_t n = grads.size();
  const bool bf16 = spec.kind == CodecKind::kBf16;
  const size_t raw_bytes = n * (bf16 ? 2 : 4);
  AlignedBuffer<float> residual(n), out(n);
  std::vector<uint8_t> wire(raw_bytes), packed, unpacked(raw_bytes);
  Result r;
  if (bf16) {
    r.select = Best(
        reps, [&] { residual.Zero(); },
        [&] {
          // As the bf16 ring does it: v = g + residual, round, keep the error; then the
          // byte planes are split for zstd.
          constexpr size_t kBlock = 4096;
          float v[kBlock];
          bf16_t q[kBlock];
          for (size_t b = 0; b < n; b += kBlock) {
            const size_t m = std::min(kBlock, n - b);
            for (size_t i = 0; i < m; ++i) v[i] = grads[b + i] + residual[b + i];
            collective::RoundToBf16WithFeedback(v, q, residual.data() + b, m);
            for (size_t i = 0; i < m; ++i) {
              wire[b + i] = static_cast<uint8_t>(q[i]);
              wire[n + b + i] = static_cast<uint8_t>(q[i] >> 8);
            }
          }
        });
  } else {
    std::memcpy(wire.data(), grads.data(), raw_bytes);
  }
  r.bytes_out = raw_bytes;
  if (spec.zstd_level > 0) {
    packed.resize(ZSTD_compressBound(raw_bytes));
    size_t z = 0;
    r.encode = Best(
        reps, [] {},
        [&] {
          z = ZSTD_compress(packed.data(), packed.size(), wire.data(), raw_bytes, spec.zstd_level);
        });
    if (!ZSTD_isError(z) && z < raw_bytes) r.bytes_out = z;
    packed.resize(ZSTD_isError(z) ? 0 : z);
  }
  r.decode = Best(
      reps, [] {},
      [&] {
        const uint8_t* src = wire.data();
        if (spec.zstd_level > 0 && r.bytes_out < raw_bytes) {
          ZSTD_decompress(unpacked.data(), raw_bytes, packed.data(), packed.size());
          src = unpacked.data();
        }
        if (bf16) {
          for (size_t i = 0; i < n; ++i) {
            out[i] = Bf16ToFloat(static_cast<bf16_t>(src[i] | (src[n + i] << 8)));
          }
        } else {
          std::memcpy(out.data(), src, raw_bytes);
        }
      });
  return r;
}

double GBps(size_t n, double seconds) {
  return seconds > 0 && seconds < 1e299 ? n * 4.0 / seconds / 1e9 : 0.0;
}

}  // namespace

int RunBenchCodec(const std::vector<std::string>& positional) {
  if (!positional.empty()) {
    std::fprintf(stderr, "ringtrain bench codec: unexpected argument '%s'\n",
                 positional[0].c_str());
    return 2;
  }
  auto size = ParseElementCount(absl::GetFlag(FLAGS_size));
  if (!size.ok()) {
    std::fprintf(stderr, "ringtrain bench codec: %s\n",
                 std::string(size.status().message()).c_str());
    return 2;
  }
  if (*size >= (int64_t{1} << 32)) {
    std::fprintf(stderr,
                 "ringtrain bench codec: --size %lld exceeds one bucket's limit (2^32 - 1)\n",
                 static_cast<long long>(*size));
    return 2;
  }
  if (absl::GetFlag(FLAGS_compress) == "auto") {
    // auto picks a codec per bucket from measured links and compute time, which this
    // one-process benchmark does not have (it used to print an internal message).
    std::fprintf(stderr,
                 "ringtrain bench codec: --compress auto chooses a codec per bucket from link "
                 "measurements, which this benchmark has none of: give a codec (none, bf16, "
                 "topk:D), or run `ringtrain bench allreduce --compress auto`\n");
    return 2;
  }
  auto spec =
      collective::ParseCodecSpec(absl::GetFlag(FLAGS_compress), absl::GetFlag(FLAGS_zstd_level));
  if (!spec.ok()) {
    std::fprintf(stderr, "ringtrain bench codec: %s\n",
                 std::string(spec.status().message()).c_str());
    return 2;
  }
  const size_t n = static_cast<size_t>(*size);
  AlignedBuffer<float> grads(n);
  FillGradientLike(grads.span());
  const int reps = n >= 50000000 ? 2 : 5;
  Result r = spec->kind == CodecKind::kTopK ? BenchTopK(grads.span(), *spec, reps)
                                            : BenchDense(grads.span(), *spec, reps);
  const uint64_t bytes_in = n * 4;
  const double ratio = r.bytes_out > 0 ? static_cast<double>(bytes_in) / r.bytes_out : 0.0;
  std::printf("bench codec: %zu elements (%.1f MB fp32), codec %s, 1 thread, %s\n", n,
              bytes_in / 1e6, spec->ToString().c_str(), DescribeCpu().c_str());
  std::printf("  %-8s %10s %10s %12s\n", "stage", "wall ms", "GB/s", "GB/s (CPU)");
  const std::pair<const char*, Timing> stages[] = {
      {"select", r.select}, {"encode", r.encode}, {"decode", r.decode}};
  for (const auto& [name, t] : stages) {
    std::printf("  %-8s %10.1f %10.2f %12.2f\n", name, t.wall_s * 1e3, GBps(n, t.wall_s),
                GBps(n, t.cpu_s));
  }
  std::printf("  bytes in %llu, out %llu, ratio %.1fx (%.2f bits per element)\n",
              static_cast<unsigned long long>(bytes_in),
              static_cast<unsigned long long>(r.bytes_out), ratio, r.bytes_out * 8.0 / n);
  std::printf(
      "{\"size\":%zu,\"codec\":\"%s\",\"select_GBps\":%.3f,\"encode_GBps\":%.3f,"
      "\"decode_GBps\":%.3f,\"bytes_in\":%llu,\"bytes_out\":%llu,\"ratio\":%.2f,"
      "\"select_cpu_GBps\":%.3f,\"encode_cpu_GBps\":%.3f,\"decode_cpu_GBps\":%.3f}\n",
      n, spec->ToString().c_str(), GBps(n, r.select.wall_s), GBps(n, r.encode.wall_s),
      GBps(n, r.decode.wall_s), static_cast<unsigned long long>(bytes_in),
      static_cast<unsigned long long>(r.bytes_out), ratio, GBps(n, r.select.cpu_s),
      GBps(n, r.encode.cpu_s), GBps(n, r.decode.cpu_s));
  return 0;
}

std::vector<std::string> BenchCodecFlagNames() { return {"size", "compress", "zstd_level"}; }

}  // namespace rt::cli
