// Export to one GGUF file for llama.cpp's `gpt2` architecture (--arch gpt2) or its
// `llama` architecture (--arch llama); llama.cpp, ollama, LM Studio and everything
// built on ggml load them.
//
// llama: token_embd.weight {C, V}; blk.N.attn_norm.weight {C}; blk.N.attn_{q,k,v,
// output}.weight {C, C} with q and k rows permuted to llama.cpp's interleaved RoPE
// pairs (export/model_source.h InterleaveRopeRows: ringtrain turns half-split pairs,
// as Hugging Face does); blk.N.ffn_norm.weight {C}; blk.N.ffn_{gate,up}.weight {C, F},
// blk.N.ffn_down.weight {F, C}; output_norm.weight {C}; output.weight {C, V} only when
// untied (else llama.cpp ties it to token_embd). Keys llama.{context_length,
// embedding_length, feed_forward_length, block_count, attention.head_count,
// attention.head_count_kv (= head_count), rope.freq_base, rope.dimension_count (= head
// size), attention.layer_norm_rms_epsilon, vocab_size}; the vocabulary and training
// facts as below.
//
// gpt2:
// Tensors (GGUF dims are innermost first, so ringtrain's row-major (out, in) matrices
// go in unchanged as {in, out}):
//   token_embd.weight {C, V}   position_embd.weight {C, T}
//   blk.N.attn_norm.{weight,bias} {C}     blk.N.attn_qkv.weight {C, 3C}, .bias {3C}
//   blk.N.attn_output.weight {C, C}, .bias {C}
//   blk.N.ffn_norm.{weight,bias} {C}      blk.N.ffn_up.weight {C, 4C}, .bias {4C}
//   blk.N.ffn_down.weight {4C, C}, .bias {C}
//   output_norm.{weight,bias} {C}
// No output.weight: llama.cpp's gpt2 loader then uses token_embd (the tied LM head).
// With f16/bf16 the 2-D tensors take that type and the 1-D ones stay f32, as
// llama.cpp's own converter does (general.file_type 1 = mostly f16, 32 = mostly bf16).
//
// Keys: general.{architecture=gpt2, type, name, description, file_type},
// gpt2.{context_length, embedding_length, feed_forward_length, block_count,
// attention.head_count, attention.layer_norm_epsilon}, and the vocabulary as
// llama.cpp's SentencePiece tokenizer ("llama"): tokenizer.ggml.{tokens, scores,
// token_type (SentencePiece's piece types: normal 1, unknown 2, control 3, user-defined
// 4, unused 5, byte 6)}, bos = eos = end-of-text id, unknown id, add_bos_token and
// add_eos_token false (ringtrain starts from the prompt as given), add_space_prefix =
// the model's add_dummy_prefix (false for `ringtrain prepare` tokenizers). Training
// facts: ringtrain.{step, tokens, data.fingerprint, data.license}.
#pragma once

#include <string>

#include "absl/status/status.h"
#include "export/model_source.h"

namespace rt::exporter {

// Writes the GGUF file at `path` (a new file: the staging one).
absl::Status WriteGgufModel(const PreparedModel& model, ExportDtype dtype, const std::string& path);

}  // namespace rt::exporter
