// One GPT-2 transformer block of GptImpl (gpt_impl.h), forward and backward: layer
// norm, fused qkv, causal attention by blocks (causal_attention.h), projection, MLP with
// GELU, two residual adds. Every *Backward accumulates into parameter gradients. Also
// the pieces the llama block (llama_block.cc) shares: a linear layer's backward and the
// attention's backward.
#include <cmath>

#include "model/causal_attention.h"
#include "model/gpt_impl.h"
#include "model/kernels.h"

namespace rt::model {

void GptImpl::LinearLayerBackward(float* dinp, float* dw, float* db, const float* dout,
                                  bf16_t* dout_h, size_t w_off, const void* inp_mm, int64_t M,
                                  int64_t K, int64_t N) {
  if (db != nullptr) {
    Timed t(this, kBiasGrad);  // (and, in bf16 runs, the bf16 copy of dout in the same pass)
    BiasBackward(db, dout, M, N, bf16_ ? dout_h : nullptr);
  } else if (bf16_) {
    Timed t(this, kBf16Convert);  // no bias (llama): the bf16 copy alone
    ToBf16(dout_h, dout, M * N);
  }
  Timed t(this, kLinearBwd);
  const void* dout_mm = Mm(dout, dout_h);
  LinearBackwardInput(dinp, dout_mm, W(w_off), M, K, N);
  LinearBackwardWeight(dw, dout_mm, inp_mm, M, K, N);
}

void GptImpl::AttentionBackward(int B, int T, BlockActs& a) {
  const int64_t M = static_cast<int64_t>(B) * T, C = C_, NH = NH_, hs = hs_;
  if (bf16_) {
    Timed t(this, kBf16Convert);
    ToBf16(dsmall_h_, dsmall_, M * C);
  }
  const AttentionDims ad{B, NH, T, hs, attn_block_};
  const void* qkv_mm = Mm(a.qkv, a.qkv_h);
  const void* dy_mm = Mm(dsmall_, dsmall_h_);
  {
    Timed t(this, kAttnMatmul);
    // datt (B,NH,T,T) = dy @ V^T ; dV = att^T @ dy (into the V columns of dqkv).
    AttentionGradScores(mm_, mt_, ad, dy_mm, qkv_mm, datt_);
    AttentionGradValues(mm_, mt_, ad, Mm(a.att, a.att_h), dy_mm, dqkv_);
  }
  {
    Timed t(this, kSoftmax);  // datt -> dscores (B,NH,T,T)
    CausalSoftmaxBackward(datt_, bf16_ ? datt_h_ : nullptr, a.att, B * NH, T,
                          1.0f / std::sqrt(static_cast<float>(hs)));
  }
  {
    Timed t(this, kAttnMatmul);
    // dQ = dscores @ K ; dK = dscores^T @ Q (into the Q and K columns of dqkv).
    AttentionGradQueryKey(mm_, mt_, ad, Mm(datt_, datt_h_), qkv_mm, dqkv_);
  }
}

void GptImpl::AttentionForward(int B, int T, BlockActs& a) {
  const int64_t M = static_cast<int64_t>(B) * T, C = C_, NH = NH_, hs = hs_;
  if (bf16_) {
    Timed t(this, kBf16Convert);
    ToBf16(a.qkv_h, a.qkv, 3 * M * C);
  }
  // Heads are read in place from qkv (B,T,3C), in blocks that skip the causal mask.
  const AttentionDims ad{B, NH, T, hs, attn_block_};
  const void* qkv_mm = Mm(a.qkv, a.qkv_h);
  {
    Timed t(this, kAttnMatmul);  // scores (B,NH,T,T) = Q @ K^T
    AttentionScores(mm_, mt_, ad, qkv_mm, a.att);
  }
  {
    Timed t(this, kSoftmax);
    CausalSoftmaxForward(a.att, a.att_h, B * NH, T, 1.0f / std::sqrt(static_cast<float>(hs)));
  }
  {
    Timed t(this, kAttnMatmul);  // y (B,T,NH,hs) = att @ V, written straight into (B,T,C)
    AttentionValues(mm_, mt_, ad, Mm(a.att, a.att_h), qkv_mm, a.atty);
  }
  if (bf16_) {
    Timed t(this, kBf16Convert);
    ToBf16(a.atty_h, a.atty, M * C);
  }
}

void GptImpl::BlockForward(int l, int B, int T, const float* x_in, float* x_out, BlockActs& a) {
  if (llama_) {
    LlamaBlockForward(l, B, T, x_in, x_out, a);
    return;
  }
  const int64_t M = static_cast<int64_t>(B) * T, C = C_;
  const size_t base = layout.block_begin(l);
  const BlockOffsets& o = layout.block();
  const float* p = params_ + base;
  {
    Timed t(this, kLayerNorm);
    LayerNormForward(a.ln1_f, a.ln1_h, a.ln1_mean, a.ln1_rstd, x_in, p + o.ln1_w, p + o.ln1_b, M,
                     C);
  }
  {
    Timed t(this, kLinearFwd);  // qkv (M,3C) = ln1 (M,C) @ qkv_w (3C,C)^T + qkv_b
    LinearForward(a.qkv, Mm(a.ln1_f, a.ln1_h), W(base + o.qkv_w), p + o.qkv_b, M, C, 3 * C, false);
  }
  AttentionForward(B, T, a);  // a.qkv -> a.atty
  {
    Timed t(this, kResidual);
    CopyFloats(a.res2, x_in, M * C);
  }
  {
    Timed t(this, kLinearFwd);  // res2 = x_in + atty @ attproj_w^T + attproj_b (sum post-op)
    LinearForward(a.res2, Mm(a.atty, a.atty_h), W(base + o.attproj_w), p + o.attproj_b, M, C, C,
                  true);
  }
  {
    Timed t(this, kLayerNorm);
    LayerNormForward(a.ln2_f, a.ln2_h, a.ln2_mean, a.ln2_rstd, a.res2, p + o.ln2_w, p + o.ln2_b, M,
                     C);
  }
  {
    Timed t(this, kLinearFwd);  // fch (M,4C) = ln2 @ fc_w (4C,C)^T + fc_b
    LinearForward(a.fch, Mm(a.ln2_f, a.ln2_h), W(base + o.fc_w), p + o.fc_b, M, C, 4 * C, false);
  }
  {
    Timed t(this, kGelu);
    GeluForward(a.gelu_f, a.gelu_h, a.fch, 4 * M * C);
  }
  if (x_out == nullptr) return;  // recompute in backward needs no block output
  {
    Timed t(this, kResidual);
    CopyFloats(x_out, a.res2, M * C);
  }
  {
    Timed t(this, kLinearFwd);  // x_out = res2 + gelu (M,4C) @ fcproj_w (C,4C)^T + fcproj_b
    LinearForward(x_out, Mm(a.gelu_f, a.gelu_h), W(base + o.fcproj_w), p + o.fcproj_b, M, 4 * C, C,
                  true);
  }
}

void GptImpl::BlockBackward(int l, int B, int T, const float* x_in, BlockActs& a, float* dres,
                            float* grads) {
  if (llama_) {
    LlamaBlockBackward(l, B, T, x_in, a, dres, grads);
    return;
  }
  const int64_t M = static_cast<int64_t>(B) * T, C = C_;
  const size_t base = layout.block_begin(l);
  const BlockOffsets& o = layout.block();
  const float* p = params_ + base;
  float* g = grads + base;

  // MLP: x_out = res2 + fcproj(gelu(fc(ln2(res2)))). dres = dL/dx_out = dL/d(fcproj out).
  // dgelu (M,4C) = dres (M,C) @ fcproj_w (C,4C)
  LinearLayerBackward(dbig_, g + o.fcproj_w, g + o.fcproj_b, dres, dres_h_, base + o.fcproj_w,
                      Mm(a.gelu_f, a.gelu_h), M, 4 * C, C);
  {
    Timed t(this, kGelu);  // dbig: dL/d(gelu out) -> dL/d(fch)
    GeluBackward(dbig_, a.fch, 4 * M * C);
  }
  // dln2 (M,C) = dfch (M,4C) @ fc_w (4C,C)
  LinearLayerBackward(dsmall_, g + o.fc_w, g + o.fc_b, dbig_, dbig_h_, base + o.fc_w,
                      Mm(a.ln2_f, a.ln2_h), M, C, 4 * C);
  {
    Timed t(this, kLayerNorm);  // dres += dL/dres2 through ln2 (residual path already in dres)
    LayerNormBackward(dres, g + o.ln2_w, g + o.ln2_b, dsmall_, a.res2, p + o.ln2_w, a.ln2_mean,
                      a.ln2_rstd, M, C);
  }

  // Attention: res2 = x_in + attproj(attn(ln1(x_in))). dres = dL/dres2 now.
  // datty (M,C) = dres @ attproj_w (C,C)
  LinearLayerBackward(dsmall_, g + o.attproj_w, g + o.attproj_b, dres, dres_h_, base + o.attproj_w,
                      Mm(a.atty, a.atty_h), M, C, C);
  AttentionBackward(B, T, a);  // dsmall_ = dL/dy -> dqkv_
  // dln1 (M,C) = dqkv (M,3C) @ qkv_w (3C,C)
  LinearLayerBackward(dsmall_, g + o.qkv_w, g + o.qkv_b, dqkv_, dqkv_h_, base + o.qkv_w,
                      Mm(a.ln1_f, a.ln1_h), M, C, 3 * C);
  {
    Timed t(this, kLayerNorm);  // dres += through ln1: dres becomes dL/dx_in
    LayerNormBackward(dres, g + o.ln1_w, g + o.ln1_b, dsmall_, x_in, p + o.ln1_w, a.ln1_mean,
                      a.ln1_rstd, M, C);
  }
}

}  // namespace rt::model
