// Our own vectorised kernels for the parts of a GPT where oneDNN has nothing fast:
// layer norm, tanh-GELU, causal masked softmax, fused softmax + cross-entropy,
// embeddings, bias gradients, residual copies and bf16 conversion; for llama blocks
// RMSNorm, rotary embeddings and SwiGLU.
//
// Each forward has its backward beside it (STYLE: llm.c). Backward functions ACCUMULATE
// (+=) into parameter gradients and into `dinp` where the comment says so. AVX-512
// and AVX2 paths are chosen at run time by core/cpu_features.h's ActiveIsa()
// (RINGTRAIN_ISA caps it; tests use SetIsaCapForTest); a portable path exists for all.
// Loops are parallel with OpenMP over rows; parameter-gradient reductions are
// parallel over columns with rows summed in order, so results do not depend on the
// thread count.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/bf16.h"

namespace rt::model {

// out (N,C) = LN(inp (N,C)) * w + b; mean, rstd (N) saved for backward. out_f32 and
// out_bf16 are optional (either may be null): bf16 runs need only the bf16 copy.
void LayerNormForward(float* out_f32, bf16_t* out_bf16, float* mean, float* rstd, const float* inp,
                      const float* w, const float* b, int64_t N, int64_t C);
// dinp (N,C) += d/dinp; dw, db (C) += ; dout (N,C).
void LayerNormBackward(float* dinp, float* dw, float* db, const float* dout, const float* inp,
                       const float* w, const float* mean, const float* rstd, int64_t N, int64_t C);

// out = gelu_tanh(inp), n elements; out_f32 / out_bf16 optional.
void GeluForward(float* out_f32, bf16_t* out_bf16, const float* inp, int64_t n);
// dinout: in = d/d(gelu out), out = d/d(gelu in) (in place); inp is the GELU input.
void GeluBackward(float* dinout, const float* inp, int64_t n);

// att (BH,T,T): rows of raw scores become softmax(scale * scores) over columns j <= t,
// zero for j > t (causal mask), in place. att_bf16 (optional) gets a bf16 copy.
// Rows t >= T_valid are not touched (T_valid == T normally).
void CausalSoftmaxForward(float* att, bf16_t* att_bf16, int64_t BH, int64_t T, float scale);
// datt (BH,T,T): in = dL/d(att), out = dL/d(scores) (in place); att is the softmax output.
// dscores_bf16 (optional) gets a bf16 copy.
void CausalSoftmaxBackward(float* datt, bf16_t* dscores_bf16, const float* att, int64_t BH,
                           int64_t T, float scale);

// Fused softmax + cross-entropy over logits (R,V). Returns sum over rows of
// -log softmax(logits)[target]. If backward, logits are replaced in place by
// grad_scale * (softmax - onehot(target)) and dlogits_bf16 (optional) gets a bf16 copy.
double SoftmaxCrossEntropy(float* logits, bf16_t* dlogits_bf16, const int32_t* targets, int64_t R,
                           int64_t V, bool backward, float grad_scale);
// The same loss, forward only, for a reference: logsumexp(row) - row[target].
double CrossEntropyRowForTest(const float* row, int64_t V, int32_t target);

// ---- llama ------------------------------------------------------------------------

// out (N,C) = inp * rstd * w, rstd (N) = 1/sqrt(mean over the row of inp^2 + eps) saved
// for backward. out_f32 / out_bf16 optional as in LayerNormForward.
void RmsNormForward(float* out_f32, bf16_t* out_bf16, float* rstd, const float* inp, const float* w,
                    int64_t N, int64_t C);
// dinp (N,C) += d/dinp; dw (C) += ; dout (N,C).
void RmsNormBackward(float* dinp, float* dw, const float* dout, const float* inp, const float* w,
                     const float* rstd, int64_t N, int64_t C);

// The cos/sin table of rotary embeddings: (T, hs) floats, row t = [cos(t w_i) for i <
// hs/2 | sin(t w_i) for i < hs/2] with w_i = theta^(-2i/hs). Angles in double, then
// rounded (tables computed in float drift by a few ulp at large t).
std::vector<float> RopeTable(int64_t T, int64_t hs, double theta);
// In place on the q and k columns of qkv (rows = B*T rows of 3C, C = NH*hs; row r is at
// position r % T): pairs (i, i + hs/2) of each head turned by the table's angle.
void RopeForward(float* qkv, const float* rope, int64_t rows, int64_t T, int64_t NH, int64_t hs);
// The backward on dqkv laid out like qkv: dL/d(turned q, k) -> dL/d(q, k), in place.
void RopeBackward(float* dqkv, const float* rope, int64_t rows, int64_t T, int64_t NH, int64_t hs);

// SwiGLU: fc (M,2F) holds gate = fc[:, :F] and up = fc[:, F:]; out (M,F) = silu(gate) *
// up with silu(g) = g sigmoid(g). out_f32 / out_bf16 optional.
void SwigluForward(float* out_f32, bf16_t* out_bf16, const float* fc, int64_t M, int64_t F);
// dfc (M,2F) = [dL/dgate | dL/dup] from dout (M,F) = dL/d(out) (overwritten, not +=).
void SwigluBackward(float* dfc, const float* dout, const float* fc, int64_t M, int64_t F);

// x (B,T,C) = wte[tokens[b,t]] + wpe[t] (wpe null: no position term, as in llama);
// tokens (B,T) are assumed in range.
void EmbeddingForward(float* x, const int32_t* tokens, const float* wte, const float* wpe,
                      int64_t B, int64_t T, int64_t C);
// dwte[tokens[b,t]] += dx[b,t]; dwpe[t] += sum_b dx[b,t] (unless dwpe is null).
// Parallel over channels.
void EmbeddingBackward(float* dwte, float* dwpe, const float* dx, const int32_t* tokens, int64_t B,
                       int64_t T, int64_t C);

// db (N) += sum over rows of dout (M,N). If dout_bf16 is not null it also receives a
// bf16 copy of dout (M,N), in the same pass (one parallel region instead of two).
void BiasBackward(float* db, const float* dout, int64_t M, int64_t N, bf16_t* dout_bf16 = nullptr);

// Parallel bulk helpers.
void CopyFloats(float* dst, const float* src, int64_t n);
void ToBf16(bf16_t* dst, const float* src, int64_t n);

}  // namespace rt::model
