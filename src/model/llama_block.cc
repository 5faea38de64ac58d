// One llama block of GptImpl (gpt_impl.h), forward and backward, llm.c style:
//   x_mid = x_in  + attproj(attention(rope(qkv(rmsnorm1(x_in)))))
//   x_out = x_mid + fcproj(silu(gate) * up),  [gate | up] = fc(rmsnorm2(x_mid))
// No biases. The attention matmuls and softmax are the GPT-2 block's (AttentionForward,
// AttentionBackward in gpt_block.cc); RoPE turns q and k in place inside qkv, so the
// attention reads the turned q and k, and the backward turns dq and dk back before the
// qkv matmul's backward. Every *Backward accumulates into parameter gradients.
#include "model/gpt_impl.h"
#include "model/kernels.h"

namespace rt::model {

void GptImpl::LlamaBlockForward(int l, int B, int T, const float* x_in, float* x_out,
                                BlockActs& a) {
  const int64_t M = static_cast<int64_t>(B) * T, C = C_, H = H_;
  const size_t base = layout.block_begin(l);
  const BlockOffsets& o = layout.block();
  const float* p = params_ + base;
  {
    Timed t(this, kLayerNorm);  // ln1 (M,C) = rmsnorm(x_in) * ln1_w
    RmsNormForward(a.ln1_f, a.ln1_h, a.ln1_rstd, x_in, p + o.ln1_w, M, C);
  }
  {
    Timed t(this, kLinearFwd);  // qkv (M,3C) = ln1 (M,C) @ qkv_w (3C,C)^T
    LinearForward(a.qkv, Mm(a.ln1_f, a.ln1_h), W(base + o.qkv_w), nullptr, M, C, 3 * C, false);
  }
  {
    Timed t(this, kRope);  // q, k columns of qkv turned by position
    RopeForward(a.qkv, rope_.data(), M, T, NH_, hs_);
  }
  AttentionForward(B, T, a);  // a.qkv -> a.atty (M,C)
  {
    Timed t(this, kResidual);
    CopyFloats(a.res2, x_in, M * C);
  }
  {
    Timed t(this, kLinearFwd);  // res2 = x_in + atty @ attproj_w (C,C)^T (sum post-op)
    LinearForward(a.res2, Mm(a.atty, a.atty_h), W(base + o.attproj_w), nullptr, M, C, C, true);
  }
  {
    Timed t(this, kLayerNorm);  // ln2 (M,C) = rmsnorm(res2) * ln2_w
    RmsNormForward(a.ln2_f, a.ln2_h, a.ln2_rstd, a.res2, p + o.ln2_w, M, C);
  }
  {
    Timed t(this, kLinearFwd);  // fch (M,2H) = [gate | up] = ln2 @ fc_w (2H,C)^T
    LinearForward(a.fch, Mm(a.ln2_f, a.ln2_h), W(base + o.fc_w), nullptr, M, C, 2 * H, false);
  }
  {
    Timed t(this, kGelu);  // swiglu (M,H) = silu(gate) * up
    SwigluForward(a.gelu_f, a.gelu_h, a.fch, M, H);
  }
  if (x_out == nullptr) return;  // recompute in backward needs no block output
  {
    Timed t(this, kResidual);
    CopyFloats(x_out, a.res2, M * C);
  }
  {
    Timed t(this, kLinearFwd);  // x_out = res2 + swiglu (M,H) @ fcproj_w (C,H)^T
    LinearForward(x_out, Mm(a.gelu_f, a.gelu_h), W(base + o.fcproj_w), nullptr, M, H, C, true);
  }
}

void GptImpl::LlamaBlockBackward(int l, int B, int T, const float* x_in, BlockActs& a, float* dres,
                                 float* grads) {
  const int64_t M = static_cast<int64_t>(B) * T, C = C_, H = H_;
  const size_t base = layout.block_begin(l);
  const BlockOffsets& o = layout.block();
  const float* p = params_ + base;
  float* g = grads + base;

  // MLP. dres = dL/dx_out = dL/d(fcproj out). dhid (M,H) = dres (M,C) @ fcproj_w (C,H).
  LinearLayerBackward(dhid_, g + o.fcproj_w, nullptr, dres, dres_h_, base + o.fcproj_w,
                      Mm(a.gelu_f, a.gelu_h), M, H, C);
  {
    Timed t(this, kGelu);  // dbig (M,2H) = [dL/dgate | dL/dup]
    SwigluBackward(dbig_, dhid_, a.fch, M, H);
  }
  // dln2 (M,C) = dbig (M,2H) @ fc_w (2H,C)
  LinearLayerBackward(dsmall_, g + o.fc_w, nullptr, dbig_, dbig_h_, base + o.fc_w,
                      Mm(a.ln2_f, a.ln2_h), M, C, 2 * H);
  {
    Timed t(this, kLayerNorm);  // dres += dL/dres2 through rmsnorm2 (residual already in dres)
    RmsNormBackward(dres, g + o.ln2_w, dsmall_, a.res2, p + o.ln2_w, a.ln2_rstd, M, C);
  }

  // Attention. dres = dL/dres2 now. datty (M,C) = dres @ attproj_w (C,C).
  LinearLayerBackward(dsmall_, g + o.attproj_w, nullptr, dres, dres_h_, base + o.attproj_w,
                      Mm(a.atty, a.atty_h), M, C, C);
  AttentionBackward(B, T, a);  // dsmall_ = dL/datty -> dqkv_ (M,3C) w.r.t. turned q, k
  {
    Timed t(this, kRope);  // dq, dk turned back: dL/d(q, k as qkv_w made them)
    RopeBackward(dqkv_, rope_.data(), M, T, NH_, hs_);
  }
  // dln1 (M,C) = dqkv (M,3C) @ qkv_w (3C,C)
  LinearLayerBackward(dsmall_, g + o.qkv_w, nullptr, dqkv_, dqkv_h_, base + o.qkv_w,
                      Mm(a.ln1_f, a.ln1_h), M, C, 3 * C);
  {
    Timed t(this, kLayerNorm);  // dres += through rmsnorm1: dres becomes dL/dx_in
    RmsNormBackward(dres, g + o.ln1_w, dsmall_, x_in, p + o.ln1_w, a.ln1_rstd, M, C);
  }
}

}  // namespace rt::model
