// ParamLayout: where each named tensor of a GPT lives in the one flat fp32 buffer.
//
// DESIGN invariant 1: parameters, gradients and optimizer moments are flat buffers
// of total_floats() floats with this same layout; tensors are (offset, shape) views.
// Each tensor starts at a multiple of 16 floats (64 bytes), so views into a
// 64-byte-aligned buffer are vector-aligned. Weights are (out, in) row-major as in llm.c.
//
// gpt2: [wte, wpe, block 0, ..., block L-1, lnf_w, lnf_b]; a block (GPT-2 order):
//   ln1_w (C) ln1_b (C) qkv_w (3C,C) qkv_b (3C) attproj_w (C,C) attproj_b (C)
//   ln2_w (C) ln2_b (C) fc_w (4C,C) fc_b (4C) fcproj_w (C,4C) fcproj_b (C)
// llama: [wte, block 0, ..., block L-1, lnf_w, lm_head (V,C) if untied]; a block:
//   ln1_w (C) qkv_w (3C,C) attproj_w (C,C) ln2_w (C) fc_w (2F,C) fcproj_w (C,F)
// where ln*_w are RMSNorm gains, qkv_w's rows are q, k, v (each head's q and k in
// half-split RoPE order, as Hugging Face stores them), fc_w's rows [0,F) are the SwiGLU
// gate and [F,2F) the up projection, fcproj_w the down projection.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "model/gpt_config.h"

namespace rt::model {

struct TensorView {
  std::string name;  // "wte", "wpe", "h3.qkv_w", "lnf_b", ...
  size_t offset;     // in floats from the start of the flat buffer (multiple of 16)
  std::vector<int64_t> shape;
  size_t count;       // product of shape
  bool weight_decay;  // true for 2-D matmul weights and embeddings
  int layer;          // block index, -1 outside blocks
};

// Offsets (in floats) of one block's tensors, relative to block_begin(layer). A llama
// block has no biases and no ln*_b: those offsets are kNone there.
inline constexpr size_t kNone = ~size_t{0};
struct BlockOffsets {
  size_t ln1_w, ln1_b, qkv_w, qkv_b, attproj_w, attproj_b;
  size_t ln2_w, ln2_b, fc_w, fc_b, fcproj_w, fcproj_b;
  size_t size;  // floats in one block, padding included
};

class ParamLayout {
 public:
  // `config` must be valid (GptConfig::Validate).
  explicit ParamLayout(const GptConfig& config);

  size_t total_floats() const { return total_; }
  const std::vector<TensorView>& tensors() const { return tensors_; }
  // First float of block `layer`; lnf begins at block_begin(n_layers).
  size_t block_begin(int layer) const {
    return blocks_begin_ + static_cast<size_t>(layer) * block_.size;
  }
  // N in "6N FLOPs per token": the parameters of matmuls, i.e. all but the tables that
  // are only gathered from: the position embedding wpe, and wte when the LM head is
  // untied (a tied wte counts once, for the LM head's matmul).
  size_t flop_params() const { return flop_params_; }
  // [begin, end) float ranges that get weight decay (for AdamW), in layout order.
  std::vector<std::pair<size_t, size_t>> DecayRanges() const;

  size_t wte() const { return wte_; }  // (V, C)
  size_t wpe() const { return wpe_; }  // (T, C); kNone on llama
  const BlockOffsets& block() const { return block_; }
  size_t lnf_w() const { return lnf_w_; }  // (C)
  size_t lnf_b() const { return lnf_b_; }  // (C); kNone on llama
  // The LM head's (V, C) weights: wte unless the model is untied.
  size_t lm_head() const { return lm_head_; }

 private:
  std::vector<TensorView> tensors_;
  BlockOffsets block_{};
  size_t wte_ = 0, wpe_ = kNone, blocks_begin_ = 0, lnf_w_ = 0, lnf_b_ = kNone, lm_head_ = 0;
  size_t total_ = 0, flop_params_ = 0;
};

}  // namespace rt::model
