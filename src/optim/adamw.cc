// AdamW update over a flat span, split into pieces with one decay setting each.
#include "optim/adamw.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "core/cpu_features.h"

namespace rt::optim {
namespace {

// Floats per piece: large enough that a parallel-for iteration amortises its cost,
// small enough that the biases and layer norms do not unbalance the threads.
constexpr size_t kPieceFloats = 1 << 14;

std::vector<FloatRange> SortAndMerge(std::vector<FloatRange> ranges) {
  std::sort(ranges.begin(), ranges.end());
  std::vector<FloatRange> merged;
  for (const FloatRange& r : ranges) {
    if (r.first >= r.second) continue;
    if (!merged.empty() && r.first <= merged.back().second) {
      merged.back().second = std::max(merged.back().second, r.second);
    } else {
      merged.push_back(r);
    }
  }
  return merged;
}

// The inner loop: one contiguous run with a fixed decay factor (1 = no decay).
// Written so that the compiler vectorises it (no aliasing between the four arrays),
// once per kernel path: baseline SSE2, AVX2 and AVX-512 widths. The parameters are
// replicated, so every path must give the same bits (a fleet mixes CPUs): only
// IEEE-exact operations (+ - * / sqrt, elementwise) and no FMA contraction, which
// CMakeLists.txt turns off for this file (-ffp-contract=off); tests/optim checks it.
inline __attribute__((always_inline)) void UpdateRunBody(
    float* __restrict p, const float* __restrict g, float* __restrict m, float* __restrict v,
    size_t count, float decay_factor, float grad_scale, float b1, float b2, float step_size,
    float inv_sqrt_bc2, float eps) {
  const float one_minus_b1 = 1.0f - b1, one_minus_b2 = 1.0f - b2;
#pragma omp simd
  for (size_t i = 0; i < count; ++i) {
    float gi = g[i] * grad_scale;
    float mi = b1 * m[i] + one_minus_b1 * gi;
    float vi = b2 * v[i] + one_minus_b2 * gi * gi;
    m[i] = mi;
    v[i] = vi;
    float denom = std::sqrt(vi) * inv_sqrt_bc2 + eps;
    p[i] = p[i] * decay_factor - step_size * mi / denom;
  }
}

// StageParams' and UpdateMoments' loops: UpdateRunBody's expressions, split.
inline __attribute__((always_inline)) void StageRunBody(
    const float* __restrict p, const float* __restrict g, const float* __restrict m,
    const float* __restrict v, float* __restrict p_out, size_t count, float decay_factor,
    float grad_scale, float b1, float b2, float step_size, float inv_sqrt_bc2, float eps) {
  const float one_minus_b1 = 1.0f - b1, one_minus_b2 = 1.0f - b2;
#pragma omp simd
  for (size_t i = 0; i < count; ++i) {
    float gi = g[i] * grad_scale;
    float mi = b1 * m[i] + one_minus_b1 * gi;
    float vi = b2 * v[i] + one_minus_b2 * gi * gi;
    float denom = std::sqrt(vi) * inv_sqrt_bc2 + eps;
    p_out[i] = p[i] * decay_factor - step_size * mi / denom;
  }
}

inline __attribute__((always_inline)) void MomentsRunBody(const float* __restrict g,
                                                          float* __restrict m, float* __restrict v,
                                                          size_t count, float grad_scale, float b1,
                                                          float b2) {
  const float one_minus_b1 = 1.0f - b1, one_minus_b2 = 1.0f - b2;
#pragma omp simd
  for (size_t i = 0; i < count; ++i) {
    float gi = g[i] * grad_scale;
    m[i] = b1 * m[i] + one_minus_b1 * gi;
    v[i] = b2 * v[i] + one_minus_b2 * gi * gi;
  }
}

#define RT_UPDATE_RUN_ARGS                                                                     \
  float *__restrict p, const float *__restrict g, float *__restrict m, float *__restrict v,    \
      size_t count, float decay_factor, float grad_scale, float b1, float b2, float step_size, \
      float inv_sqrt_bc2, float eps
#define RT_UPDATE_RUN_CALL \
  p, g, m, v, count, decay_factor, grad_scale, b1, b2, step_size, inv_sqrt_bc2, eps

__attribute__((target("avx512f"))) void UpdateRunAvx512(RT_UPDATE_RUN_ARGS) {
  UpdateRunBody(RT_UPDATE_RUN_CALL);
}
__attribute__((target("avx2"))) void UpdateRunAvx2(RT_UPDATE_RUN_ARGS) {
  UpdateRunBody(RT_UPDATE_RUN_CALL);
}
void UpdateRunBaseline(RT_UPDATE_RUN_ARGS) { UpdateRunBody(RT_UPDATE_RUN_CALL); }

void UpdateRun(Isa isa, RT_UPDATE_RUN_ARGS) {
  if (isa >= Isa::kAvx512) {
    UpdateRunAvx512(RT_UPDATE_RUN_CALL);
  } else if (isa >= Isa::kAvx2) {
    UpdateRunAvx2(RT_UPDATE_RUN_CALL);
  } else {
    UpdateRunBaseline(RT_UPDATE_RUN_CALL);
  }
}

}  // namespace

AdamW::AdamW(const AdamWConfig& config, size_t n, std::vector<FloatRange> decay_ranges)
    : config_(config), n_(n), m_(n), v_(n) {
  for (const FloatRange& r : decay_ranges) {
    if (r.first > r.second || r.second > n) {
      std::fprintf(stderr, "AdamW: decay range [%zu, %zu) is outside the span of %zu floats\n",
                   r.first, r.second, n);
      std::abort();
    }
  }
  decay_ranges_ = SortAndMerge(std::move(decay_ranges));
  // Cover [0, n) with alternating runs, then cut each run into pieces.
  auto add_run = [this](size_t begin, size_t end, bool decay) {
    for (size_t b = begin; b < end; b += kPieceFloats) {
      pieces_.push_back({b, std::min(end, b + kPieceFloats), decay});
    }
  };
  size_t pos = 0;
  for (const FloatRange& r : decay_ranges_) {
    add_run(pos, r.first, false);
    add_run(r.first, r.second, true);
    pos = r.second;
  }
  add_run(pos, n, false);
}

AdamW::StepScalars AdamW::ScalarsOf(float lr, int64_t t) const {
  // Bias corrections in double: b^t for large t underflows gracefully to 0.
  const double bc1 = 1.0 - std::pow(static_cast<double>(config_.beta1), static_cast<double>(t));
  const double bc2 = 1.0 - std::pow(static_cast<double>(config_.beta2), static_cast<double>(t));
  return {static_cast<float>(lr / bc1), static_cast<float>(1.0 / std::sqrt(bc2)),
          1.0f - lr * config_.weight_decay};
}

void AdamW::Step(absl::Span<float> params, absl::Span<const float> grads, float lr, int64_t t,
                 float grad_scale) {
  if (params.size() != n_ || grads.size() != n_ || t < 1) {
    std::fprintf(stderr, "AdamW::Step: params %zu, grads %zu floats, expected %zu; t=%lld\n",
                 params.size(), grads.size(), n_, static_cast<long long>(t));
    std::abort();
  }
  const StepScalars k = ScalarsOf(lr, t);
  const float step_size = k.step_size, inv_sqrt_bc2 = k.inv_sqrt_bc2, decay_factor = k.decay_factor;

  float* p = params.data();
  const float* g = grads.data();
  float* m = m_.data();
  float* v = v_.data();
  const AdamWConfig c = config_;
  const std::vector<Piece>& pieces = pieces_;
  const long num_pieces = static_cast<long>(pieces.size());
  const Isa isa = ActiveIsa();
#pragma omp parallel for schedule(static)
  for (long k = 0; k < num_pieces; ++k) {
    const Piece& piece = pieces[k];
    UpdateRun(isa, p + piece.begin, g + piece.begin, m + piece.begin, v + piece.begin,
              piece.end - piece.begin, piece.decay ? decay_factor : 1.0f, grad_scale, c.beta1,
              c.beta2, step_size, inv_sqrt_bc2, c.eps);
  }
}

void AdamW::StageParams(absl::Span<const float> params, absl::Span<const float> grads,
                        absl::Span<float> params_out, float lr, int64_t t, float grad_scale) const {
  if (params.size() != n_ || grads.size() != n_ || params_out.size() != n_ || t < 1) {
    std::fprintf(
        stderr, "AdamW::StageParams: params %zu, grads %zu, out %zu floats, expected %zu; t=%lld\n",
        params.size(), grads.size(), params_out.size(), n_, static_cast<long long>(t));
    std::abort();
  }
  const StepScalars k = ScalarsOf(lr, t);
  const float step_size = k.step_size, inv_sqrt_bc2 = k.inv_sqrt_bc2, decay_factor = k.decay_factor;
  const float* p = params.data();
  const float* g = grads.data();
  const float* m = m_.data();
  const float* v = v_.data();
  float* out = params_out.data();
  const AdamWConfig c = config_;
  const std::vector<Piece>& pieces = pieces_;
  const long num_pieces = static_cast<long>(pieces.size());
#pragma omp parallel for schedule(static)
  for (long k = 0; k < num_pieces; ++k) {
    const Piece& piece = pieces[k];
    const size_t b = piece.begin;
    StageRunBody(p + b, g + b, m + b, v + b, out + b, piece.end - b,
                 piece.decay ? decay_factor : 1.0f, grad_scale, c.beta1, c.beta2, step_size,
                 inv_sqrt_bc2, c.eps);
  }
}

void AdamW::UpdateMoments(absl::Span<const float> grads, float grad_scale) {
  if (grads.size() != n_) {
    std::fprintf(stderr, "AdamW::UpdateMoments: grads %zu floats, expected %zu\n", grads.size(),
                 n_);
    std::abort();
  }
  const float* g = grads.data();
  float* m = m_.data();
  float* v = v_.data();
  const AdamWConfig c = config_;
  const std::vector<Piece>& pieces = pieces_;
  const long num_pieces = static_cast<long>(pieces.size());
#pragma omp parallel for schedule(static)
  for (long k = 0; k < num_pieces; ++k) {
    const size_t b = pieces[k].begin;
    MomentsRunBody(g + b, m + b, v + b, pieces[k].end - b, grad_scale, c.beta1, c.beta2);
  }
}

float AdamW::BlockFloor(size_t block, float inv_bc2) const {
  const size_t block_end = std::min(n_, block + kPreconditionBlock);
  const float* v = v_.data();
  double sum = 0;  // over the whole block, wherever the caller's range cuts it
  for (size_t j = block; j < block_end; ++j) sum += v[j];
  return kPreconditionFloor *
         std::sqrt(static_cast<float>(sum / static_cast<double>(block_end - block)) * inv_bc2);
}

void AdamW::Precondition(absl::Span<float> grads, size_t offset, int64_t frozen_t) const {
  if (offset > n_ || grads.size() > n_ - offset || frozen_t < 1) {
    std::fprintf(stderr, "AdamW::Precondition: %zu floats at %zu of %zu, frozen_t=%lld\n",
                 grads.size(), offset, n_, static_cast<long long>(frozen_t));
    std::abort();
  }
  const double bc2 =
      1.0 - std::pow(static_cast<double>(config_.beta2), static_cast<double>(frozen_t));
  const float inv_bc2 = static_cast<float>(1.0 / bc2);
  const float* v = v_.data();
  const size_t end = offset + grads.size();
  for (size_t block = offset - offset % kPreconditionBlock; block < end;
       block += kPreconditionBlock) {
    const size_t block_end = std::min(n_, block + kPreconditionBlock);
    const float floor = BlockFloor(block, inv_bc2);
    const size_t b = std::max(block, offset), e = std::min(block_end, end);
    float* g = grads.data() - offset;  // indexed by span position
    for (size_t i = b; i < e; ++i) {
      const float d = std::max(std::sqrt(v[i] * inv_bc2), floor) + config_.eps;
      g[i] /= d;
    }
  }
}

void AdamW::StepPreconditioned(absl::Span<float> params, absl::Span<float> grads, float lr,
                               int64_t t, int64_t frozen_t,
                               const std::vector<FloatRange>& dense_sums,
                               const std::vector<FloatRange>& refreshed) {
  bool ranges_ok = true;
  for (size_t k = 0; k < dense_sums.size(); ++k) {
    const FloatRange& r = dense_sums[k];
    ranges_ok = ranges_ok && r.first <= r.second && r.second <= n_ &&
                (k == 0 || dense_sums[k - 1].second <= r.first);
  }
  if (params.size() != n_ || grads.size() != n_ || frozen_t < 1 || t <= frozen_t || !ranges_ok) {
    std::fprintf(stderr,
                 "AdamW::StepPreconditioned: params %zu, grads %zu floats, expected %zu; t=%lld, "
                 "frozen_t=%lld\n",
                 params.size(), grads.size(), n_, static_cast<long long>(t),
                 static_cast<long long>(frozen_t));
    std::abort();
  }
  // The first preconditioned step carries the dense steps' momentum over into the new
  // units (m / d, the same division the gradients get).
  if (t == frozen_t + 1) Precondition(m_.span(), 0, frozen_t);
  if (!dense_sums.empty()) LearnDenseV(grads, frozen_t, dense_sums);
  const double bc1 = 1.0 - std::pow(static_cast<double>(config_.beta1), static_cast<double>(t));
  const float step_size = static_cast<float>(lr / bc1);
  const float decay_factor = 1.0f - lr * config_.weight_decay;
  const float b1 = config_.beta1, one_minus_b1 = 1.0f - config_.beta1;
  float* p = params.data();
  const float* g = grads.data();
  float* m = m_.data();
  const std::vector<Piece>& pieces = pieces_;
  const long num_pieces = static_cast<long>(pieces.size());
#pragma omp parallel for schedule(static)
  for (long k = 0; k < num_pieces; ++k) {
    const Piece& piece = pieces[k];
    const float decay = piece.decay ? decay_factor : 1.0f;
#pragma omp simd
    for (size_t i = piece.begin; i < piece.end; ++i) {
      const float mi = b1 * m[i] + one_minus_b1 * g[i];
      m[i] = mi;
      p[i] = p[i] * decay - step_size * mi;
    }
  }
  // Between steps m is in the floored units every top-k step reads it in.
  if (!dense_sums.empty()) RefloorMomentum(frozen_t, dense_sums);
  if (!refreshed.empty()) LearnRefreshedV(grads, frozen_t, refreshed);
}

void AdamW::LearnRefreshedV(absl::Span<const float> grads, int64_t frozen_t,
                            const std::vector<FloatRange>& ranges) {
  const double bc2 =
      1.0 - std::pow(static_cast<double>(config_.beta2), static_cast<double>(frozen_t));
  const float inv_bc2 = static_cast<float>(1.0 / bc2), bc2f = static_cast<float>(bc2);
  const float b2 = config_.beta2, one_minus_b2 = 1.0f - config_.beta2;
  const float eps = config_.eps;
  float* v = v_.data();
  float* m = m_.data();
  // Pass 1, with the denominators every peer divided by (v and the block floors as they
  // were): the exact gradient r = g * d_old feeds v, and m goes to gradient units.
  // Pass 2: m into the units of the new denominators (floors from the v just learned).
  for (int pass = 0; pass < 2; ++pass) {
    for (const FloatRange& r : ranges) {
      if (r.first == r.second) continue;
      // Each block's floor, read before any of its v changes in this pass.
      for (size_t block = r.first - r.first % kPreconditionBlock; block < r.second;
           block += kPreconditionBlock) {
        const float floor = BlockFloor(block, inv_bc2);
        const size_t b = std::max(block, r.first);
        const size_t e = std::min(block + kPreconditionBlock, r.second);
        for (size_t i = b; i < e; ++i) {
          const float d = std::max(std::sqrt(v[i] * inv_bc2), floor) + eps;
          if (pass == 0) {
            const float raw = grads[i] * d;
            v[i] = b2 * v[i] + one_minus_b2 * bc2f * raw * raw;
            m[i] *= d;
          } else {
            m[i] /= d;
          }
        }
      }
    }
  }
}

void AdamW::RefloorMomentum(int64_t frozen_t, const std::vector<FloatRange>& ranges) {
  const double bc2 =
      1.0 - std::pow(static_cast<double>(config_.beta2), static_cast<double>(frozen_t));
  const float inv_bc2 = static_cast<float>(1.0 / bc2);
  const float* v = v_.data();
  float* m = m_.data();
  const float eps = config_.eps;
  for (const FloatRange& r : ranges) {
    for (size_t block = r.first - r.first % kPreconditionBlock; block < r.second;
         block += kPreconditionBlock) {
      const float floor = BlockFloor(block, inv_bc2);  // from the v just learned
      const size_t b = std::max(block, r.first), e = std::min(block + kPreconditionBlock, r.second);
      for (size_t i = b; i < e; ++i) {
        const float rms = std::sqrt(v[i] * inv_bc2);
        m[i] *= (rms + eps) / (std::max(rms, floor) + eps);
      }
    }
  }
}

void AdamW::LearnDenseV(absl::Span<float> grads, int64_t frozen_t,
                        const std::vector<FloatRange>& ranges) {
  const double bc2 =
      1.0 - std::pow(static_cast<double>(config_.beta2), static_cast<double>(frozen_t));
  const float inv_bc2 = static_cast<float>(1.0 / bc2), bc2f = static_cast<float>(bc2);
  const float b2 = config_.beta2, one_minus_b2 = 1.0f - config_.beta2;
  // Every denominator from v as it was before this update: the floors of all blocks
  // the ranges touch first, then each coordinate reads its own v before writing it.
  std::vector<std::pair<size_t, float>> floors;  // (block start, floor)
  for (const FloatRange& r : ranges) {
    if (r.first == r.second) continue;
    for (size_t block = r.first - r.first % kPreconditionBlock; block < r.second;
         block += kPreconditionBlock) {
      if (floors.empty() || floors.back().first != block) {
        floors.emplace_back(block, BlockFloor(block, inv_bc2));
      }
    }
  }
  float* v = v_.data();
  float* m = m_.data();
  const float eps = config_.eps;
  size_t f = 0;
  for (const FloatRange& r : ranges) {
    for (size_t i = r.first; i < r.second; ++i) {
      const size_t block = i - i % kPreconditionBlock;
      while (floors[f].first != block) ++f;
      const float floor = floors[f].second;
      const float rms_old = std::sqrt(v[i] * inv_bc2);
      const float d_sent = std::max(rms_old, floor) + eps;  // what every peer divided by
      const float raw = grads[i] * d_sent;
      v[i] = b2 * v[i] + one_minus_b2 * bc2f * raw * raw;
      const float d_new = std::sqrt(v[i] * inv_bc2) + eps;  // Adam's, no floor
      // m in the units of the new denominator for this step: Adam's m / d_new.
      m[i] *= d_sent / d_new;  // m comes in floored units (RefloorMomentum)
      grads[i] = raw / d_new;
    }
  }
}

std::vector<FloatRange> DecayRangesForShard(const std::vector<FloatRange>& full_ranges,
                                            size_t shard_begin, size_t shard_end) {
  std::vector<FloatRange> out;
  for (const FloatRange& r : full_ranges) {
    size_t b = std::max(r.first, shard_begin), e = std::min(r.second, shard_end);
    if (b < e) out.emplace_back(b - shard_begin, e - shard_begin);
  }
  return out;
}

}  // namespace rt::optim
