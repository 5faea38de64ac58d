// GptImpl: the model's state and the pieces of one step, shared by gpt.cc (set-up,
// embedding, LM head, the step's order, Gpt's interface), gpt_block.cc (one GPT-2
// transformer block forward and backward) and llama_block.cc (one llama block).
// Internal to src/model/: use gpt.h.
//
// Notation (llm.c): B batch, T sequence length, C channels, NH heads, hs = C/NH head
// size, V vocabulary, L blocks, M = B*T rows, H the MLP's hidden width (gpt2 4C,
// llama F).
#pragma once

#include <cstdint>
#include <functional>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "core/aligned_buffer.h"
#include "core/bf16.h"
#include "core/clock.h"
#include "model/gpt.h"
#include "model/matmul.h"

namespace rt::model {

// Layer kinds timed for `bench compute --profile`.
enum LayerKind {
  kEmbedding,
  kLayerNorm,
  kLinearFwd,
  kLinearBwd,
  kAttnMatmul,
  kSoftmax,
  kGelu,
  kResidual,
  kLmHead,
  kCrossEntropy,
  kBiasGrad,
  kBf16Convert,
  kRope,
  kNumKinds
};
inline const char* const kKindNames[kNumKinds] = {"embedding",
                                                  "layernorm / rmsnorm",
                                                  "linear fwd (qkv/proj/fc)",
                                                  "linear bwd (qkv/proj/fc)",
                                                  "attention matmuls",
                                                  "causal softmax",
                                                  "gelu / swiglu",
                                                  "residual copies",
                                                  "lm head matmuls",
                                                  "softmax+xent",
                                                  "bias grads",
                                                  "bf16 conversion",
                                                  "rope"};

// Activations of one block for up to max_batch sequences. fp32 runs fill the *_f
// matmul inputs, bf16 runs the *_h ones (never both). llama blocks use the same
// fields: ln* are RMSNorms (no mean), qkv holds q and k after RoPE, fch is the fc
// output (gate | up, (B,T,2F)) and gelu_* the SwiGLU output (B,T,F).
struct BlockActs {
  float* ln1_mean;  // (B,T)     gpt2 only
  float* ln1_rstd;  // (B,T)
  float* ln1_f;     // (B,T,C)   fp32 only
  bf16_t* ln1_h;    // (B,T,C)   bf16 only
  float* qkv;       // (B,T,3C)
  bf16_t* qkv_h;    // (B,T,3C)  bf16 only
  float* att;       // (B,NH,T,T) softmax output
  bf16_t* att_h;    // (B,NH,T,T) bf16 only
  float* atty;      // (B,T,C)   attention output before projection
  bf16_t* atty_h;   // (B,T,C)   bf16 only
  float* res2;      // (B,T,C)   residual after attention
  float* ln2_mean;  // (B,T)     gpt2 only
  float* ln2_rstd;  // (B,T)
  float* ln2_f;     // (B,T,C)   fp32 only
  bf16_t* ln2_h;    // (B,T,C)   bf16 only
  float* fch;       // (B,T,4C)  fc output before GELU (llama: (B,T,2F))
  float* gelu_f;    // (B,T,H)   fp32 only
  bf16_t* gelu_h;   // (B,T,H)   bf16 only
};

class GptImpl {
 public:
  // allocate == false only sizes the activation memory (Gpt::EstimateActivationBytes).
  GptImpl(const GptConfig& c, const GptOptions& o, bool allocate = true);

  double ForwardBackward(const float* params, const int32_t* tokens, const int32_t* targets, int B,
                         float grad_scale, float* grads,
                         const std::function<void(size_t)>& grad_ready);
  double Loss(const float* params, const int32_t* tokens, const int32_t* targets, int B);
  void LastLogits(const float* params, const int32_t* tokens, int B, int T, float* logits);
  // One small matmul of the model's precision, so that a precision oneDNN cannot run
  // on this CPU fails in Create() rather than at the first step.
  absl::Status ProbeMatmul() {
    std::vector<float> f(64, 0.0f), out(64);
    std::vector<bf16_t> h(64, 0);
    LinearForward(out.data(), Mm(f.data(), h.data()), Mm(f.data(), h.data()), nullptr, 8, 8, 8,
                  false);
    return mm_.status();
  }
  const absl::Status& matmul_status() const { return mm_.status(); }

  GptConfig cfg;
  ParamLayout layout;
  GptOptions opt;
  size_t activation_bytes = 0;
  bool profiling = false;
  double kind_ms[kNumKinds] = {};

 private:
  // Bump allocation of all activation/scratch arrays from two aligned buffers.
  struct Plan {
    std::vector<std::pair<float**, size_t>> f;
    std::vector<std::pair<bf16_t**, size_t>> h;
  };
  void Allocate(Plan& plan, bool allocate);

  // A timed region for the profile.
  class Timed {
   public:
    Timed(GptImpl* g, LayerKind k) : g_(g), k_(k), start_ns_(NowNs()) {}
    ~Timed() { g_->kind_ms[k_] += static_cast<double>(NowNs() - start_ns_) * 1e-6; }

   private:
    GptImpl* g_;
    LayerKind k_;
    int64_t start_ns_;
  };

  // Matmul-operand helpers: a `void*` is fp32 or bf16 according to mt_.
  const void* Mm(const float* f, const bf16_t* h) const {
    return bf16_ ? static_cast<const void*>(h) : static_cast<const void*>(f);
  }
  const void* Offset(const void* p, int64_t elems) const { return OperandAt(p, mt_, elems); }
  // Parameter `off` (absolute float offset) as a matmul operand.
  const void* W(size_t off) const { return Mm(params_ + off, params_h_.data() + off); }

  // out (M,N) = inp (M,K) @ w (N,K)^T (+ b) (+ out if accumulate).
  void LinearForward(float* out, const void* inp, const void* w, const float* b, int64_t M,
                     int64_t K, int64_t N, bool accumulate);
  // dinp (M,K) = dout (M,N) @ w (N,K).
  void LinearBackwardInput(float* dinp, const void* dout, const void* w, int64_t M, int64_t K,
                           int64_t N);
  // dw (N,K) += dout (M,N)^T @ inp (M,K).
  void LinearBackwardWeight(float* dw, const void* dout, const void* inp, int64_t M, int64_t K,
                            int64_t N);

  // Backward of the linear layer out (M,N) = inp (M,K) @ w (N,K)^T + b, w at parameter
  // offset w_off: db += column sums of dout, dinp = dout @ w (overwritten), dw += dout^T @
  // inp. In bf16 runs dout_h receives dout's bf16 copy (made while summing) and feeds the
  // matmuls; inp_mm is the layer's input as a matmul operand.
  void LinearLayerBackward(float* dinp, float* dw, float* db, const float* dout, bf16_t* dout_h,
                           size_t w_off, const void* inp_mm, int64_t M, int64_t K, int64_t N);

  void PrepareParams(const float* params);
  void Embed(const int32_t* tokens, int B, int T);
  // Block l on x_in (B,T,C); writes acts and, unless x_out is null, x_out (B,T,C).
  // (The llama block when cfg.arch is llama.)
  void BlockForward(int l, int B, int T, const float* x_in, float* x_out, BlockActs& a);
  // dres (B,T,C): in dL/dx_out, out dL/dx_in. Accumulates into grads of block l.
  void BlockBackward(int l, int B, int T, const float* x_in, BlockActs& a, float* dres,
                     float* grads);
  // The llama block (llama_block.cc), same contracts.
  void LlamaBlockForward(int l, int B, int T, const float* x_in, float* x_out, BlockActs& a);
  void LlamaBlockBackward(int l, int B, int T, const float* x_in, BlockActs& a, float* dres,
                          float* grads);
  // The attention's forward shared by both blocks: from a.qkv (M,3C; its bf16 copy made
  // here) to a.att and a.atty (M,C, with its bf16 copy).
  void AttentionForward(int B, int T, BlockActs& a);
  // The attention's backward shared by both blocks: from dy (dsmall_, (M,C), its bf16
  // copy in dsmall_h_ made here) to dqkv_ (M,3C) = dL/d(q,k,v as attention read them).
  void AttentionBackward(int B, int T, BlockActs& a);
  // Final layer norm of x (rows, C) into lnf_{f,h} rows [0, rows).
  void FinalLayerNorm(const float* x, int64_t rows);
  // LM head + cross-entropy over M rows of lnf output; if grads, backward too:
  // dlnf (M,C) = dL/d(lnf out) and d wte accumulated.
  double LmHeadLoss(const int32_t* targets, int64_t M, float grad_scale, float* grads);
  // Runs the blocks forward over resid_[0]; stores activations per block if `store`.
  void ForwardBlocks(int B, int T, bool store);

  BlockActs& ActsFor(int l, bool store) { return acts_[store && !opt.recompute ? l : 0]; }

  bool bf16_;
  bool llama_;
  MatType mt_;
  int64_t C_, V_, Tmax_, NH_, hs_, L_, Mmax_, lm_rows_;
  int64_t H_;                // MLP hidden width: 4C (gpt2) or F (llama)
  std::vector<float> rope_;  // llama: RoPE cos|sin table (Tmax, hs), kernels.h RopeTable
  int64_t attn_block_;       // rows per causal attention block
  const float* params_ = nullptr;
  AlignedBuffer<bf16_t> params_h_;  // bf16 copy of the weights (bf16 runs)
  AlignedBuffer<float> f32_;
  AlignedBuffer<bf16_t> h_;
  MatmulEngine mm_;

  std::vector<BlockActs> acts_;
  std::vector<float*> resid_;     // L+1 arrays (B,T,C): block inputs; resid_[L] = final
  float *lnf_mean_, *lnf_rstd_;   // (B,T)
  float* lnf_f_;                  // (B,T,C)
  bf16_t* lnf_h_;                 // (B,T,C)
  float* logits_;                 // (lm_rows, V)
  bf16_t* logits_h_;              // (lm_rows, V)
  float* dres_;                   // (B,T,C)
  bf16_t* dres_h_;                // (B,T,C)
  float* dsmall_;                 // (B,T,C)
  bf16_t* dsmall_h_;              // (B,T,C)
  float* dbig_;                   // (B,T,4C) (llama: (B,T,2F), dL/d(gate | up))
  bf16_t* dbig_h_;                // (B,T,4C) (llama: (B,T,2F))
  float* dhid_;                   // llama: (B,T,F) dL/d(SwiGLU out)
  float* dqkv_;                   // (B,T,3C)
  bf16_t* dqkv_h_;                // (B,T,3C)
  float* datt_;                   // (B,NH,T,T)
  bf16_t* datt_h_;                // (B,NH,T,T)
  std::vector<float> last_rows_;  // (B,C) for LastLogits
};

}  // namespace rt::model
