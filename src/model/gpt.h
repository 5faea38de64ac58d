// Gpt: a GPT-2 model (forward, backward, loss, logits) over a flat parameter buffer.
//
// The object owns no parameters: callers pass spans laid out by layout() (DESIGN
// invariant 1), so the optimizer, collectives and checkpoints see only flat buffers.
// It owns the activation and scratch memory for up to `max_batch` sequences and the
// oneDNN primitives (cached per shape). Heavy work runs on oneDNN matmuls; softmax,
// layer norm, GELU, residual adds and the fused softmax + cross-entropy are our own
// vectorized kernels (AVX-512 when the CPU has it, chosen at run time).
//
// Threading: calls use the OpenMP thread count in effect (omp_set_num_threads). A Gpt
// is not thread-safe: one call at a time. Results are deterministic for a given
// thread count and precision.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "model/gpt_config.h"
#include "model/param_layout.h"

namespace rt::model {

struct GptOptions {
  Precision precision = Precision::kFp32;
  bool recompute = false;  // keep only block inputs; recompute each block in backward
  int max_batch = 1;       // largest B passed to ForwardBackward/Loss/LastLogits
  // Rows per block of the causal attention matmuls (model/causal_attention.h); 0 picks
  // AttentionBlock(seq_len). Results do not depend on it beyond float rounding.
  int attention_block = 0;
  // Logits the LM head holds at once (floats): its rows are computed in chunks of about
  // this many; 0 = 16M floats (64 MB). Tests set it small to reach several chunks with
  // a small vocabulary. Results do not depend on it beyond float rounding.
  int64_t lm_head_chunk_floats = 0;
};

// Wall time per layer kind, accumulated over calls while profiling is on (ms).
struct LayerProfile {
  std::vector<std::pair<std::string, double>> ms;  // ("attention matmuls", 12.3), ...
};

class GptImpl;

class Gpt {
 public:
  // Errors: invalid config (Validate's message), max_batch < 1, a precision oneDNN
  // cannot run here: FailedPrecondition "precision bf16 is not available on this CPU
  // (oneDNN ISA avx2 has no bf16 matmul) ..." (then the failing matmul's shape).
  static absl::StatusOr<std::unique_ptr<Gpt>> Create(const GptConfig& config,
                                                     const GptOptions& options);
  ~Gpt();
  Gpt(const Gpt&) = delete;
  Gpt& operator=(const Gpt&) = delete;

  const GptConfig& config() const;
  const ParamLayout& layout() const;
  const GptOptions& options() const;

  // GPT-2 init from seed: N(0,0.02), residual output projections (attproj_w,
  // fcproj_w) N(0,0.02/sqrt(2L)), LN gains 1, biases 0. params.size() == total_floats.
  void InitParams(absl::Span<float> params, uint64_t seed) const;

  // tokens, targets: (B,T) int32 row-major, 1 <= B <= max_batch, T == seq_len, ids in
  // [0,vocab). Forward + backward. ACCUMULATES d(grad_scale * sum of per-token
  // cross-entropy)/d(params) into grads. Returns the sum over B*T positions of
  // cross-entropy in nats. grad_ready (optional) is called on the calling thread with
  // offset o whenever grads[o, total) are final for this call; o decreases
  // monotonically and the last call has o == 0.
  double ForwardBackward(absl::Span<const float> params, const int32_t* tokens,
                         const int32_t* targets, int B, float grad_scale, absl::Span<float> grads,
                         const std::function<void(size_t)>& grad_ready = {});
  // Forward only: sum of cross-entropy in nats over B*T positions (T == seq_len).
  double Loss(absl::Span<const float> params, const int32_t* tokens, const int32_t* targets, int B);
  // Logits (B, vocab) of the last position of each of B sequences of length T
  // (1 <= T <= seq_len, 1 <= B <= max_batch); tokens are (B,T) row-major.
  void LastLogits(absl::Span<const float> params, const int32_t* tokens, int B, int T,
                  float* logits);

  // The first oneDNN failure of any call so far (OK if none); it stays. A call that
  // failed returns NaN (loss, logits) and leaves NaN in grads: callers check status()
  // after ForwardBackward/Loss/LastLogits and return it. Create() already fails where
  // oneDNN cannot run the model's precision at all (bf16 under an AVX2 cap).
  const absl::Status& status() const;

  size_t ActivationBytes() const;  // bytes held for activations at max_batch (for reports)
  // What ActivationBytes() would be for a model created with these arguments, computed
  // without allocating (for `ringtrain plan` on models too big for this machine).
  static absl::StatusOr<size_t> EstimateActivationBytes(const GptConfig& config,
                                                        const GptOptions& options);

  // Per-layer-kind timing (bench compute --profile). Off by default (it adds syncs).
  void EnableProfile(bool on);
  LayerProfile TakeProfile();  // returns and resets the accumulated times

 private:
  explicit Gpt(std::unique_ptr<GptImpl> impl);
  std::unique_ptr<GptImpl> impl_;
};

}  // namespace rt::model
