// Gpt: GPT-2 or llama forward/backward over a flat parameter buffer (see gpt.h).
//
// Notation (llm.c): B batch, T sequence length, C channels, NH heads, hs = C/NH head
// size, V vocabulary, L blocks, M = B*T rows. Weights are (out, in) row-major, so a
// linear layer is out = inp @ W^T + b. Every *Backward accumulates into parameter
// gradients (oneDNN sum post-op, or += in our kernels).
//
// This file: activation memory, parameter init, embedding, final layer norm, LM head
// with cross-entropy, the order of a step, and Gpt's interface. The transformer blocks
// are gpt_block.cc and llama_block.cc, GptImpl's declaration gpt_impl.h.
#include "model/gpt.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "core/aligned_buffer.h"
#include "core/bf16.h"
#include "core/clock.h"
#include "model/causal_attention.h"
#include "model/gpt_impl.h"
#include "model/kernels.h"
#include "model/matmul.h"
#include "model/onednn_isa.h"

namespace rt::model {
namespace {

// splitmix64: a counter-based generator, so parameter init is parallel and reproducible.
uint64_t SplitMix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}
// Standard normal number `i` of stream `seed` (Box-Muller on two hashed uniforms).
float NormalAt(uint64_t seed, uint64_t i) {
  const uint64_t a = SplitMix64(seed * 0x2545f4914f6cdd1dull + 2 * i);
  const uint64_t b = SplitMix64(seed * 0x2545f4914f6cdd1dull + 2 * i + 1);
  const double u1 = (static_cast<double>(a >> 11) + 1.0) * (1.0 / 9007199254740992.0);
  const double u2 = static_cast<double>(b >> 11) * (1.0 / 9007199254740992.0);
  return static_cast<float>(std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2));
}

}  // namespace

GptImpl::GptImpl(const GptConfig& c, const GptOptions& o, bool allocate)
    : cfg(c),
      layout(c),
      opt(o),
      bf16_(o.precision == Precision::kBf16),
      llama_(c.arch == Arch::kLlama) {
  mt_ = bf16_ ? MatType::kBf16 : MatType::kF32;
  C_ = c.dim;
  V_ = c.vocab_size;
  Tmax_ = c.seq_len;
  NH_ = c.n_heads;
  hs_ = C_ / NH_;
  L_ = c.n_layers;
  H_ = c.Hidden();
  if (llama_ && allocate) rope_ = RopeTable(Tmax_, hs_, c.rope_theta);
  Mmax_ = static_cast<int64_t>(o.max_batch) * Tmax_;
  attn_block_ = o.attention_block > 0 ? o.attention_block : AttentionBlock(Tmax_);
  // LM-head rows per chunk: logits of about 16M floats (64 MB, or
  // o.lm_head_chunk_floats) exist at a time. The
  // rows are split into equal chunks rounded up to a multiple of 64: oneDNN's bf16
  // kernels block rows by 16-64, and a ragged last chunk (1024 rows at vocab 50,257 were
  // 333+333+333+25) cost the LM head 8% of its time on the 124M shape.
  const int64_t cap_floats =
      o.lm_head_chunk_floats > 0 ? o.lm_head_chunk_floats : int64_t{16} << 20;
  const int64_t cap_rows = std::max<int64_t>(cap_floats / V_, 1);
  const int64_t chunks = (Mmax_ + cap_rows - 1) / cap_rows;
  lm_rows_ = std::min(Mmax_, ((Mmax_ + chunks - 1) / chunks + 63) / 64 * 64);

  const size_t M = static_cast<size_t>(Mmax_), C = static_cast<size_t>(C_);
  const size_t A = static_cast<size_t>(o.max_batch) * NH_ * Tmax_ * Tmax_;
  const size_t fp = bf16_ ? 0 : 1, hp = bf16_ ? 1 : 0;  // which matmul-input copies exist
  const size_t H = static_cast<size_t>(H_);
  const size_t fc_out = llama_ ? 2 * H : H;  // fc's output: GELU's input, or gate | up
  const size_t mean = llama_ ? 0 : 1;        // RMSNorm keeps no mean
  Plan plan;
  acts_.resize(o.recompute ? 1 : L_);
  for (BlockActs& a : acts_) {
    plan.f.insert(plan.f.end(), {{&a.ln1_mean, mean * M},
                                 {&a.ln1_rstd, M},
                                 {&a.ln1_f, fp * M * C},
                                 {&a.qkv, 3 * M * C},
                                 {&a.att, A},
                                 {&a.atty, M * C},
                                 {&a.res2, M * C},
                                 {&a.ln2_mean, mean * M},
                                 {&a.ln2_rstd, M},
                                 {&a.ln2_f, fp * M * C},
                                 {&a.fch, fc_out * M},
                                 {&a.gelu_f, fp * H * M}});
    plan.h.insert(plan.h.end(), {{&a.ln1_h, hp * M * C},
                                 {&a.qkv_h, hp * 3 * M * C},
                                 {&a.att_h, hp * A},
                                 {&a.atty_h, hp * M * C},
                                 {&a.ln2_h, hp * M * C},
                                 {&a.gelu_h, hp * H * M}});
  }
  resid_.resize(L_ + 1);
  for (float*& r : resid_) plan.f.push_back({&r, M * C});
  const size_t R = static_cast<size_t>(lm_rows_) * V_;
  plan.f.insert(plan.f.end(), {{&lnf_mean_, mean * M},
                               {&lnf_rstd_, M},
                               {&lnf_f_, fp * M * C},
                               {&logits_, R},
                               {&dres_, M * C},
                               {&dsmall_, M * C},
                               {&dbig_, fc_out * M},
                               {&dhid_, llama_ ? H * M : 0},
                               {&dqkv_, 3 * M * C},
                               {&datt_, A}});
  plan.h.insert(plan.h.end(), {{&lnf_h_, hp * M * C},
                               {&logits_h_, hp * R},
                               {&dres_h_, hp * M * C},
                               {&dsmall_h_, hp * M * C},
                               {&dbig_h_, hp * fc_out * M},
                               {&dqkv_h_, hp * 3 * M * C},
                               {&datt_h_, hp * A}});
  Allocate(plan, allocate);
  if (bf16_ && allocate) params_h_.Resize(layout.total_floats());
}

void GptImpl::Allocate(Plan& plan, bool allocate) {
  auto round = [](size_t n) { return (n + 31) / 32 * 32; };  // 64-byte aligned starts
  size_t nf = 0, nh = 0;
  for (auto& [p, n] : plan.f) nf += round(n);
  for (auto& [p, n] : plan.h) nh += round(n);
  if (!allocate) {
    activation_bytes = nf * sizeof(float) + nh * sizeof(bf16_t);
    return;
  }
  f32_.Resize(nf);
  h_.Resize(nh);
  size_t at = 0;
  for (auto& [p, n] : plan.f) {
    *p = n == 0 ? nullptr : f32_.data() + at;
    at += round(n);
  }
  at = 0;
  for (auto& [p, n] : plan.h) {
    *p = n == 0 ? nullptr : h_.data() + at;
    at += round(n);
  }
  activation_bytes = f32_.bytes() + h_.bytes();
}

// ---- linear layers (oneDNN) -----------------------------------------------------------

void GptImpl::LinearForward(float* out, const void* inp, const void* w, const float* b, int64_t M,
                            int64_t K, int64_t N, bool accumulate) {
  mm_.Run(mt_, RowMajor(M, K, K), inp, Transposed(K, N, K), w, RowMajor(M, N, N), out, b,
          accumulate);
}

void GptImpl::LinearBackwardInput(float* dinp, const void* dout, const void* w, int64_t M,
                                  int64_t K, int64_t N) {
  mm_.Run(mt_, RowMajor(M, N, N), dout, RowMajor(N, K, K), w, RowMajor(M, K, K), dinp, nullptr,
          false);
}

void GptImpl::LinearBackwardWeight(float* dw, const void* dout, const void* inp, int64_t M,
                                   int64_t K, int64_t N) {
  // dout^T read through strides (no transpose copy); sum post-op accumulates into dw.
  mm_.Run(mt_, Transposed(N, M, N), dout, RowMajor(M, K, K), inp, RowMajor(N, K, K), dw, nullptr,
          true);
}

// ---- model pieces ------------------------------------------------------------------------

void GptImpl::PrepareParams(const float* params) {
  params_ = params;
  if (bf16_) {
    Timed t(this, kBf16Convert);
    ToBf16(params_h_.data(), params, static_cast<int64_t>(layout.total_floats()));
  }
}

void GptImpl::Embed(const int32_t* tokens, int B, int T) {
  Timed t(this, kEmbedding);
  EmbeddingForward(resid_[0], tokens, params_ + layout.wte(),
                   llama_ ? nullptr : params_ + layout.wpe(), B, T, C_);
}

void GptImpl::FinalLayerNorm(const float* x, int64_t rows) {
  Timed t(this, kLayerNorm);
  if (llama_) {
    RmsNormForward(lnf_f_, lnf_h_, lnf_rstd_, x, params_ + layout.lnf_w(), rows, C_);
    return;
  }
  LayerNormForward(lnf_f_, lnf_h_, lnf_mean_, lnf_rstd_, x, params_ + layout.lnf_w(),
                   params_ + layout.lnf_b(), rows, C_);
}

double GptImpl::LmHeadLoss(const int32_t* targets, int64_t M, float grad_scale, float* grads) {
  const void* lnf_mm = Mm(lnf_f_, lnf_h_);
  const void* wte_mm = W(layout.lm_head());  // wte itself unless untied
  double loss = 0.0;
  for (int64_t r0 = 0; r0 < M; r0 += lm_rows_) {
    const int64_t rows = std::min(lm_rows_, M - r0);
    const void* x_mm = Offset(lnf_mm, r0 * C_);
    {
      Timed t(this, kLmHead);  // logits (rows,V) = lnf (rows,C) @ lm_head (V,C)^T
      LinearForward(logits_, x_mm, wte_mm, nullptr, rows, C_, V_, false);
    }
    {
      Timed t(this, kCrossEntropy);  // logits -> grad_scale * (softmax - onehot) in place
      loss += SoftmaxCrossEntropy(logits_, grads != nullptr && bf16_ ? logits_h_ : nullptr,
                                  targets + r0, rows, V_, grads != nullptr, grad_scale);
    }
    if (grads == nullptr) continue;
    Timed t(this, kLmHead);
    const void* dlogits_mm = Mm(logits_, logits_h_);
    // dlnf rows (rows,C) = dlogits @ lm_head ; dlm_head (V,C) += dlogits^T @ lnf rows.
    LinearBackwardInput(dsmall_ + r0 * C_, dlogits_mm, wte_mm, rows, C_, V_);
    LinearBackwardWeight(grads + layout.lm_head(), dlogits_mm, x_mm, rows, C_, V_);
  }
  return loss;
}

void GptImpl::ForwardBlocks(int B, int T, bool store) {
  for (int l = 0; l < L_; ++l) BlockForward(l, B, T, resid_[l], resid_[l + 1], ActsFor(l, store));
}

double GptImpl::ForwardBackward(const float* params, const int32_t* tokens, const int32_t* targets,
                                int B, float grad_scale, float* grads,
                                const std::function<void(size_t)>& grad_ready) {
  const int T = static_cast<int>(Tmax_);
  const int64_t M = static_cast<int64_t>(B) * T;
  PrepareParams(params);
  Embed(tokens, B, T);
  ForwardBlocks(B, T, /*store=*/true);
  FinalLayerNorm(resid_[L_], M);
  const double loss = LmHeadLoss(targets, M, grad_scale, grads);  // dsmall_ = dL/d(lnf out)

  {
    Timed t(this, kLayerNorm);  // dres = dL/d resid_[L] through the final layer norm
    std::fill(dres_, dres_ + M * C_, 0.0f);
    if (llama_) {
      RmsNormBackward(dres_, grads + layout.lnf_w(), dsmall_, resid_[L_], params_ + layout.lnf_w(),
                      lnf_rstd_, M, C_);
    } else {
      LayerNormBackward(dres_, grads + layout.lnf_w(), grads + layout.lnf_b(), dsmall_, resid_[L_],
                        params_ + layout.lnf_w(), lnf_mean_, lnf_rstd_, M, C_);
    }
  }
  if (grad_ready) grad_ready(layout.block_begin(L_));
  for (int l = L_ - 1; l >= 0; --l) {
    if (opt.recompute) BlockForward(l, B, T, resid_[l], nullptr, acts_[0]);
    BlockBackward(l, B, T, resid_[l], ActsFor(l, true), dres_, grads);
    if (grad_ready) grad_ready(layout.block_begin(l));
  }
  {
    Timed t(this, kEmbedding);
    EmbeddingBackward(grads + layout.wte(), llama_ ? nullptr : grads + layout.wpe(), dres_, tokens,
                      B, T, C_);
  }
  if (grad_ready) grad_ready(0);
  return loss;
}

double GptImpl::Loss(const float* params, const int32_t* tokens, const int32_t* targets, int B) {
  const int T = static_cast<int>(Tmax_);
  PrepareParams(params);
  Embed(tokens, B, T);
  ForwardBlocks(B, T, /*store=*/false);
  FinalLayerNorm(resid_[L_], static_cast<int64_t>(B) * T);
  return LmHeadLoss(targets, static_cast<int64_t>(B) * T, 0.0f, nullptr);
}

void GptImpl::LastLogits(const float* params, const int32_t* tokens, int B, int T, float* logits) {
  PrepareParams(params);
  Embed(tokens, B, T);
  ForwardBlocks(B, T, /*store=*/false);
  last_rows_.resize(static_cast<size_t>(B) * C_);
  for (int b = 0; b < B; ++b) {
    const float* row = resid_[L_] + (static_cast<int64_t>(b) * T + T - 1) * C_;
    std::copy(row, row + C_, last_rows_.data() + static_cast<int64_t>(b) * C_);
  }
  FinalLayerNorm(last_rows_.data(), B);
  Timed t(this, kLmHead);
  LinearForward(logits, Mm(lnf_f_, lnf_h_), W(layout.lm_head()), nullptr, B, C_, V_, false);
}

// ---- Gpt ----------------------------------------------------------------------------------

namespace {

// What Create and EstimateActivationBytes refuse alike.
absl::Status Validate(const GptConfig& config, const GptOptions& options) {
  if (absl::Status s = config.Validate(); !s.ok()) return s;
  if (options.max_batch < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_batch must be at least 1, got ", options.max_batch));
  }
  if (options.attention_block < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "attention_block must be 0 (auto) or positive, got ", options.attention_block));
  }
  if (options.lm_head_chunk_floats < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "lm_head_chunk_floats must be 0 (16M) or positive, got ", options.lm_head_chunk_floats));
  }
  return absl::OkStatus();
}

}  // namespace

Gpt::Gpt(std::unique_ptr<GptImpl> impl) : impl_(std::move(impl)) {}
Gpt::~Gpt() = default;

absl::StatusOr<std::unique_ptr<Gpt>> Gpt::Create(const GptConfig& config,
                                                 const GptOptions& options) {
  if (absl::Status s = Validate(config, options); !s.ok()) return s;
  auto impl = std::make_unique<GptImpl>(config, options);
  if (absl::Status s = impl->ProbeMatmul(); !s.ok()) {
    // oneDNN has no bf16 matmul below AVX-512 (an AVX2 CPU, or an ISA cap): say so in
    // the caller's terms, with oneDNN's own message after it.
    if (options.precision == Precision::kBf16) {
      return absl::FailedPreconditionError(
          absl::StrCat("precision bf16 is not available on this CPU (oneDNN ISA ", OnednnIsaName(),
                       " has no bf16 matmul); use fp32. ", s.message()));
    }
    return s;
  }
  return std::unique_ptr<Gpt>(new Gpt(std::move(impl)));
}

const absl::Status& Gpt::status() const { return impl_->matmul_status(); }

const GptConfig& Gpt::config() const { return impl_->cfg; }
const ParamLayout& Gpt::layout() const { return impl_->layout; }
const GptOptions& Gpt::options() const { return impl_->opt; }
size_t Gpt::ActivationBytes() const { return impl_->activation_bytes; }

absl::StatusOr<size_t> Gpt::EstimateActivationBytes(const GptConfig& config,
                                                    const GptOptions& options) {
  if (absl::Status s = Validate(config, options); !s.ok()) return s;
  // The same sizing code as Create(), minus the allocations.
  return GptImpl(config, options, /*allocate=*/false).activation_bytes;
}

void Gpt::InitParams(absl::Span<float> params, uint64_t seed) const {
  const int L = impl_->cfg.n_layers;
  const float resid_std = 0.02f / std::sqrt(2.0f * static_cast<float>(L));
  std::fill(params.begin(), params.end(), 0.0f);
  for (const TensorView& t : impl_->layout.tensors()) {
    const bool is_ln_gain =
        absl::EndsWith(t.name, "ln1_w") || absl::EndsWith(t.name, "ln2_w") || t.name == "lnf_w";
    const bool is_bias = !is_ln_gain && t.shape.size() == 1;
    float* p = params.data() + t.offset;
    const int64_t n = static_cast<int64_t>(t.count);
    if (is_ln_gain) {
      std::fill(p, p + n, 1.0f);
    } else if (!is_bias) {
      const bool resid = absl::EndsWith(t.name, "attproj_w") || absl::EndsWith(t.name, "fcproj_w");
      const float stddev = resid ? resid_std : 0.02f;
      // Stream per tensor offset: same seed => same values whatever the thread count.
#pragma omp parallel for schedule(static)
      for (int64_t i = 0; i < n; ++i) p[i] = stddev * NormalAt(seed + t.offset, i);
    }
  }
}

namespace {
bool TokensInRange(const int32_t* ids, int64_t n, int vocab) {
  for (int64_t i = 0; i < n; ++i) {
    if (ids[i] < 0 || ids[i] >= vocab) return false;
  }
  return true;
}
}  // namespace

double Gpt::ForwardBackward(absl::Span<const float> params, const int32_t* tokens,
                            const int32_t* targets, int B, float grad_scale,
                            absl::Span<float> grads,
                            const std::function<void(size_t)>& grad_ready) {
  const GptConfig& c = impl_->cfg;
  const int64_t n = static_cast<int64_t>(B) * c.seq_len;
  // Precondition violations give NaN and leave grads untouched (no crash, no corruption).
  if (B < 1 || B > impl_->opt.max_batch || params.size() != impl_->layout.total_floats() ||
      grads.size() != impl_->layout.total_floats() || !TokensInRange(tokens, n, c.vocab_size) ||
      !TokensInRange(targets, n, c.vocab_size)) {
    return std::numeric_limits<double>::quiet_NaN();
  }
  const double loss = impl_->ForwardBackward(params.data(), tokens, targets, B, grad_scale,
                                             grads.data(), grad_ready);
  return status().ok() ? loss : std::numeric_limits<double>::quiet_NaN();
}

double Gpt::Loss(absl::Span<const float> params, const int32_t* tokens, const int32_t* targets,
                 int B) {
  const GptConfig& c = impl_->cfg;
  const int64_t n = static_cast<int64_t>(B) * c.seq_len;
  if (B < 1 || B > impl_->opt.max_batch || params.size() != impl_->layout.total_floats() ||
      !TokensInRange(tokens, n, c.vocab_size) || !TokensInRange(targets, n, c.vocab_size)) {
    return std::numeric_limits<double>::quiet_NaN();
  }
  const double loss = impl_->Loss(params.data(), tokens, targets, B);
  return status().ok() ? loss : std::numeric_limits<double>::quiet_NaN();
}

void Gpt::LastLogits(absl::Span<const float> params, const int32_t* tokens, int B, int T,
                     float* logits) {
  const GptConfig& c = impl_->cfg;
  if (B < 1 || B > impl_->opt.max_batch || T < 1 || T > c.seq_len ||
      params.size() != impl_->layout.total_floats() ||
      !TokensInRange(tokens, static_cast<int64_t>(B) * T, c.vocab_size)) {
    std::fill(logits, logits + static_cast<int64_t>(std::max(B, 0)) * c.vocab_size,
              std::numeric_limits<float>::quiet_NaN());
    return;
  }
  impl_->LastLogits(params.data(), tokens, B, T, logits);
  if (!status().ok()) {
    std::fill(logits, logits + static_cast<int64_t>(B) * c.vocab_size,
              std::numeric_limits<float>::quiet_NaN());
  }
}

void Gpt::EnableProfile(bool on) { impl_->profiling = on; }

LayerProfile Gpt::TakeProfile() {
  LayerProfile p;
  for (int k = 0; k < kNumKinds; ++k) {
    p.ms.emplace_back(kKindNames[k], impl_->kind_ms[k]);
    impl_->kind_ms[k] = 0.0;
  }
  return p;
}

}  // namespace rt::model
