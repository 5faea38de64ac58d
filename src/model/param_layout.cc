// ParamLayout: assigns 16-float-aligned offsets to the GPT-2 or llama tensors (see header).
#include "model/param_layout.h"

#include "absl/strings/str_cat.h"

namespace rt::model {
namespace {

constexpr size_t kAlignFloats = 16;
size_t RoundUp(size_t n) { return (n + kAlignFloats - 1) / kAlignFloats * kAlignFloats; }

}  // namespace

ParamLayout::ParamLayout(const GptConfig& config) {
  const int64_t V = config.vocab_size, T = config.seq_len, C = config.dim;
  const int L = config.n_layers;
  const int64_t H = config.Hidden();
  const bool llama = config.arch == Arch::kLlama;
  size_t at = 0;
  auto add = [&](std::string name, std::vector<int64_t> shape, bool decay, int layer) {
    size_t count = 1;
    for (int64_t d : shape) count *= static_cast<size_t>(d);
    size_t offset = at;
    tensors_.push_back(TensorView{std::move(name), offset, std::move(shape), count, decay, layer});
    at = RoundUp(at + count);
    return offset;
  };
  wte_ = add("wte", {V, C}, true, -1);
  if (!llama) wpe_ = add("wpe", {T, C}, true, -1);
  blocks_begin_ = at;
  for (int l = 0; l < L; ++l) {
    const size_t begin = at;
    const std::string p = absl::StrCat("h", l, ".");
    BlockOffsets b;
    if (llama) {
      b = BlockOffsets{kNone, kNone, kNone, kNone, kNone, kNone, kNone,
                       kNone, kNone, kNone, kNone, kNone, 0};
      b.ln1_w = add(p + "ln1_w", {C}, false, l) - begin;
      b.qkv_w = add(p + "qkv_w", {3 * C, C}, true, l) - begin;
      b.attproj_w = add(p + "attproj_w", {C, C}, true, l) - begin;
      b.ln2_w = add(p + "ln2_w", {C}, false, l) - begin;
      b.fc_w = add(p + "fc_w", {2 * H, C}, true, l) - begin;
      b.fcproj_w = add(p + "fcproj_w", {C, H}, true, l) - begin;
      b.size = at - begin;
      block_ = b;
      continue;
    }
    b.ln1_w = add(p + "ln1_w", {C}, false, l) - begin;
    b.ln1_b = add(p + "ln1_b", {C}, false, l) - begin;
    b.qkv_w = add(p + "qkv_w", {3 * C, C}, true, l) - begin;
    b.qkv_b = add(p + "qkv_b", {3 * C}, false, l) - begin;
    b.attproj_w = add(p + "attproj_w", {C, C}, true, l) - begin;
    b.attproj_b = add(p + "attproj_b", {C}, false, l) - begin;
    b.ln2_w = add(p + "ln2_w", {C}, false, l) - begin;
    b.ln2_b = add(p + "ln2_b", {C}, false, l) - begin;
    b.fc_w = add(p + "fc_w", {4 * C, C}, true, l) - begin;
    b.fc_b = add(p + "fc_b", {4 * C}, false, l) - begin;
    b.fcproj_w = add(p + "fcproj_w", {C, 4 * C}, true, l) - begin;
    b.fcproj_b = add(p + "fcproj_b", {C}, false, l) - begin;
    b.size = at - begin;
    block_ = b;
  }
  if (L == 0) block_.size = 0;
  lnf_w_ = add("lnf_w", {C}, false, -1);
  if (!llama) lnf_b_ = add("lnf_b", {C}, false, -1);
  lm_head_ = llama && config.untied ? add("lm_head", {V, C}, true, -1) : wte_;
  total_ = at;
  flop_params_ = 0;
  // An untied model's wte is only gathered from (its LM head is lm_head): no matmul.
  for (const TensorView& t : tensors_) {
    const bool gathered_only = t.name == "wpe" || (t.name == "wte" && lm_head_ != wte_);
    if (!gathered_only) flop_params_ += t.count;
  }
}

std::vector<std::pair<size_t, size_t>> ParamLayout::DecayRanges() const {
  std::vector<std::pair<size_t, size_t>> ranges;
  for (const TensorView& t : tensors_) {
    if (t.weight_decay) ranges.emplace_back(t.offset, t.offset + t.count);
  }
  return ranges;
}

}  // namespace rt::model
