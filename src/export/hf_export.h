// Export to a Hugging Face model directory: GPT2LMHeadModel (--arch gpt2) or
// LlamaForCausalLM (--arch llama) weights in safetensors and the files transformers'
// from_pretrained reads.
//
// llama: model.embed_tokens.weight (V,C), model.layers.N.{input_layernorm,
// post_attention_layernorm}.weight (C), model.layers.N.self_attn.{q,k,v,o}_proj.weight
// (C,C) (q, k rows in the half-split RoPE order transformers rotates, ringtrain's own),
// model.layers.N.mlp.{gate,up}_proj.weight (F,C), mlp.down_proj.weight (C,F),
// model.norm.weight (C), lm_head.weight (V,C) only when untied (tie_word_embeddings);
// config.json a LlamaConfig (silu, rms_norm_eps, rope_theta, no biases). The other
// files as for gpt2.
//
// gpt2:
//   model.safetensors        transformer.wte.weight (V,C), transformer.wpe.weight (T,C),
//                            transformer.h.N.{ln_1,ln_2}.{weight,bias} (C),
//                            transformer.h.N.attn.c_attn.{weight (C,3C), bias (3C)},
//                            transformer.h.N.attn.c_proj.{weight (C,C), bias (C)},
//                            transformer.h.N.mlp.c_fc.{weight (C,4C), bias (4C)},
//                            transformer.h.N.mlp.c_proj.{weight (4C,C), bias (C)},
//                            transformer.ln_f.{weight,bias} (C). Matmul weights are in
//                            GPT-2's Conv1D orientation (in, out): the transpose of
//                            ringtrain's (out, in). No lm_head.weight: it is tied to wte
//                            (tie_word_embeddings). Every tensor in the chosen dtype;
//                            metadata {"format": "pt"} as transformers requires.
//   config.json              GPT2Config (activation gelu_new = tanh GELU, eps 1e-5,
//                            no dropout, bos = eos = end-of-text)
//   generation_config.json   bos/eos, max_length = the context length
//   tokenizer.model          the SentencePiece model, byte for byte
//   tokenizer_config.json    LlamaTokenizer (transformers' SentencePiece class) in legacy
//                            mode without BOS/EOS insertion or prefix space, so it
//                            encodes exactly as SentencePiece (and ringtrain) does
//   special_tokens_map.json  unk, bos, eos
//   README.md                a model card: shape, training, data licence, how to load
#pragma once

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "export/model_source.h"

namespace rt::exporter {

// The names written into the directory (what `--force` may replace).
const std::vector<std::string>& HuggingFaceFileNames();

// Writes the files above into `dir` (an existing, empty directory: the staging one).
absl::Status WriteHuggingFaceModel(const PreparedModel& model, ExportDtype dtype,
                                   const std::string& dir);

}  // namespace rt::exporter
