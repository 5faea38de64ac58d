// Hugging Face GPT-2 or Llama directory writer (see header for the files and their layout).
#include "export/hf_export.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/json_text.h"
#include "core/status_macros.h"
#include "export/safetensors_writer.h"

namespace rt::exporter {
namespace {

const char* TorchDtype(ExportDtype dtype) {
  switch (dtype) {
    case ExportDtype::kF32:
      return "float32";
    case ExportDtype::kF16:
      return "float16";
    case ExportDtype::kBf16:
      return "bfloat16";
  }
  return "float32";
}

// Every weight of the model in GPT-2's names and orientation, into `w`.
void AddWeights(const PreparedModel& m, ExportDtype dtype, SafetensorsWriter* w) {
  const model::GptConfig& c = m.source->config;
  const int64_t V = c.vocab_size, T = c.seq_len, C = c.dim;
  // Copies of views: the lambdas run later, inside Write.
  auto plain = [&m, dtype, w](const std::string& name, std::vector<int64_t> shape, size_t offset) {
    size_t count = 1;
    for (int64_t d : shape) count *= static_cast<size_t>(d);
    absl::Span<const float> values = m.Tensor(offset, count);
    w->AddTensor(name, std::move(shape), dtype,
                 [values, dtype](std::string* out) { AppendEncoded(values, dtype, out); });
  };
  // ringtrain (out, in) -> Conv1D (in, out).
  auto conv1d = [&m, dtype, w](const std::string& name, int64_t out_dim, int64_t in_dim,
                               size_t offset) {
    absl::Span<const float> values = m.Tensor(offset, static_cast<size_t>(out_dim * in_dim));
    w->AddTensor(name, {in_dim, out_dim}, dtype,
                 [values, out_dim, in_dim, dtype](std::string* out) {
                   AppendEncoded(Transposed(values, out_dim, in_dim), dtype, out);
                 });
  };
  const model::ParamLayout& L = m.layout;
  if (c.arch == model::Arch::kLlama) {
    // nn.Linear weights are (out, in) like ringtrain's, and q/k rows are already in
    // Hugging Face's half-split RoPE order: every tensor goes in as it is.
    const int64_t H = c.Hidden();
    plain("model.embed_tokens.weight", {V, C}, L.wte());
    const model::BlockOffsets& o = L.block();
    for (int l = 0; l < c.n_layers; ++l) {
      const size_t b = L.block_begin(l);
      const std::string p = absl::StrCat("model.layers.", l, ".");
      plain(p + "input_layernorm.weight", {C}, b + o.ln1_w);
      plain(p + "self_attn.q_proj.weight", {C, C}, b + o.qkv_w);
      plain(p + "self_attn.k_proj.weight", {C, C}, b + o.qkv_w + C * C);
      plain(p + "self_attn.v_proj.weight", {C, C}, b + o.qkv_w + 2 * C * C);
      plain(p + "self_attn.o_proj.weight", {C, C}, b + o.attproj_w);
      plain(p + "post_attention_layernorm.weight", {C}, b + o.ln2_w);
      plain(p + "mlp.gate_proj.weight", {H, C}, b + o.fc_w);
      plain(p + "mlp.up_proj.weight", {H, C}, b + o.fc_w + H * C);
      plain(p + "mlp.down_proj.weight", {C, H}, b + o.fcproj_w);
    }
    plain("model.norm.weight", {C}, L.lnf_w());
    if (c.untied) plain("lm_head.weight", {V, C}, L.lm_head());
    return;
  }
  plain("transformer.wte.weight", {V, C}, L.wte());
  plain("transformer.wpe.weight", {T, C}, L.wpe());
  const model::BlockOffsets& o = L.block();
  for (int l = 0; l < c.n_layers; ++l) {
    const size_t b = L.block_begin(l);
    const std::string p = absl::StrCat("transformer.h.", l, ".");
    plain(p + "ln_1.weight", {C}, b + o.ln1_w);
    plain(p + "ln_1.bias", {C}, b + o.ln1_b);
    conv1d(p + "attn.c_attn.weight", 3 * C, C, b + o.qkv_w);
    plain(p + "attn.c_attn.bias", {3 * C}, b + o.qkv_b);
    conv1d(p + "attn.c_proj.weight", C, C, b + o.attproj_w);
    plain(p + "attn.c_proj.bias", {C}, b + o.attproj_b);
    plain(p + "ln_2.weight", {C}, b + o.ln2_w);
    plain(p + "ln_2.bias", {C}, b + o.ln2_b);
    conv1d(p + "mlp.c_fc.weight", 4 * C, C, b + o.fc_w);
    plain(p + "mlp.c_fc.bias", {4 * C}, b + o.fc_b);
    conv1d(p + "mlp.c_proj.weight", C, 4 * C, b + o.fcproj_w);
    plain(p + "mlp.c_proj.bias", {C}, b + o.fcproj_b);
  }
  plain("transformer.ln_f.weight", {C}, L.lnf_w());
  plain("transformer.ln_f.bias", {C}, L.lnf_b());
}

std::string Piece(const PreparedModel& m, int id, const char* fallback) {
  return id >= 0 && id < static_cast<int>(m.vocab.pieces.size()) ? m.vocab.pieces[id].text
                                                                 : fallback;
}

int UnknownId(const PreparedModel& m) {
  for (size_t i = 0; i < m.vocab.pieces.size(); ++i) {
    if (m.vocab.pieces[i].type == PieceType::kUnknown) return static_cast<int>(i);
  }
  return -1;
}

std::string ConfigJson(const PreparedModel& m, ExportDtype dtype) {
  const model::GptConfig& c = m.source->config;
  const int eot = m.source->eot_id;
  const std::string eot_json = eot >= 0 ? absl::StrCat(eot) : "null";
  if (c.arch == model::Arch::kLlama) {
    return absl::StrCat(
        "{\n  \"architectures\": [\"LlamaForCausalLM\"],\n  \"model_type\": \"llama\",\n",
        "  \"vocab_size\": ", c.vocab_size, ",\n  \"hidden_size\": ", c.dim,
        ",\n  \"intermediate_size\": ", c.Hidden(), ",\n  \"num_hidden_layers\": ", c.n_layers,
        ",\n  \"num_attention_heads\": ", c.n_heads, ",\n  \"num_key_value_heads\": ", c.n_heads,
        ",\n  \"head_dim\": ", c.dim / c.n_heads, ",\n  \"max_position_embeddings\": ", c.seq_len,
        ",\n  \"hidden_act\": \"silu\",\n  \"rms_norm_eps\": ", JsonNumber(model::kRmsNormEpsilon),
        ",\n  \"rope_theta\": ", JsonNumber(c.rope_theta),
        ",\n  \"attention_bias\": false,\n  \"mlp_bias\": false,\n"
        "  \"attention_dropout\": 0.0,\n  \"initializer_range\": 0.02,\n"
        "  \"tie_word_embeddings\": ",
        c.untied ? "false" : "true", ",\n  \"use_cache\": true,\n  \"bos_token_id\": ", eot_json,
        ",\n  \"eos_token_id\": ", eot_json, ",\n  \"torch_dtype\": \"", TorchDtype(dtype),
        "\"\n}\n");
  }
  return absl::StrCat(
      "{\n  \"architectures\": [\"GPT2LMHeadModel\"],\n  \"model_type\": \"gpt2\",\n",
      "  \"vocab_size\": ", c.vocab_size, ",\n  \"n_positions\": ", c.seq_len,
      ",\n  \"n_ctx\": ", c.seq_len, ",\n  \"n_embd\": ", c.dim, ",\n  \"n_layer\": ", c.n_layers,
      ",\n  \"n_head\": ", c.n_heads, ",\n  \"n_inner\": ", 4 * c.dim,
      ",\n  \"activation_function\": \"gelu_new\",\n  \"layer_norm_epsilon\": ",
      JsonNumber(model::kLayerNormEpsilon),
      ",\n  \"resid_pdrop\": 0.0,\n  \"embd_pdrop\": 0.0,\n  \"attn_pdrop\": 0.0,\n"
      "  \"initializer_range\": 0.02,\n  \"scale_attn_weights\": true,\n"
      "  \"scale_attn_by_inverse_layer_idx\": false,\n  \"reorder_and_upcast_attn\": false,\n"
      "  \"tie_word_embeddings\": true,\n  \"use_cache\": true,\n  \"bos_token_id\": ",
      eot_json, ",\n  \"eos_token_id\": ", eot_json, ",\n  \"torch_dtype\": \"", TorchDtype(dtype),
      "\"\n}\n");
}

std::string GenerationConfigJson(const PreparedModel& m) {
  const int eot = m.source->eot_id;
  const std::string eot_json = eot >= 0 ? absl::StrCat(eot) : "null";
  return absl::StrCat("{\n  \"bos_token_id\": ", eot_json, ",\n  \"eos_token_id\": ", eot_json,
                      ",\n  \"pad_token_id\": ", eot_json,
                      ",\n  \"max_length\": ", m.source->config.seq_len, "\n}\n");
}

std::string TokenizerConfigJson(const PreparedModel& m) {
  const std::string unk = Piece(m, UnknownId(m), "<unk>");
  const std::string eot = Piece(m, m.source->eot_id, "<|endoftext|>");
  return absl::StrCat(
      "{\n  \"tokenizer_class\": \"LlamaTokenizer\",\n  \"legacy\": true,\n"
      "  \"add_bos_token\": false,\n  \"add_eos_token\": false,\n"
      "  \"add_prefix_space\": false,\n  \"clean_up_tokenization_spaces\": false,\n"
      "  \"spaces_between_special_tokens\": false,\n  \"sp_model_kwargs\": {},\n"
      "  \"unk_token\": ",
      JsonQuote(unk), ",\n  \"bos_token\": ", JsonQuote(eot),
      ",\n  \"eos_token\": ", JsonQuote(eot), ",\n  \"pad_token\": ", JsonQuote(eot),
      ",\n  \"model_max_length\": ", m.source->config.seq_len, "\n}\n");
}

std::string SpecialTokensMapJson(const PreparedModel& m) {
  const std::string unk = Piece(m, UnknownId(m), "<unk>");
  const std::string eot = Piece(m, m.source->eot_id, "<|endoftext|>");
  return absl::StrCat(
      "{\n  \"unk_token\": ", JsonQuote(unk), ",\n  \"bos_token\": ", JsonQuote(eot),
      ",\n  \"eos_token\": ", JsonQuote(eot), ",\n  \"pad_token\": ", JsonQuote(eot), "\n}\n");
}

std::string ModelCard(const PreparedModel& m, ExportDtype dtype) {
  const ModelSource& s = *m.source;
  const model::GptConfig& c = s.config;
  std::string trained = absl::StrCat(s.step, " optimizer steps");
  if (s.tokens_trained > 0) absl::StrAppend(&trained, ", ", s.tokens_trained, " tokens");
  if (c.arch == model::Arch::kLlama) {
    return absl::StrCat(
        "---\nlibrary_name: transformers\ntags:\n- llama\n- ringtrain\n---\n\n# ", s.name, "\n\n",
        absl::StrFormat("A Llama-style model (RMSNorm, rotary embeddings, SwiGLU MLP of %d; %d "
                        "layers, %d heads, width %d, trained on contexts of %d tokens, vocabulary "
                        "%d, %s LM head) trained with ringtrain: %s. Weights in %s.\n\n",
                        c.Hidden(), c.n_layers, c.n_heads, c.dim, c.seq_len, c.vocab_size,
                        c.untied ? "untied" : "tied", trained, ExportDtypeName(dtype)),
        "Training data licence: ",
        s.data_license.empty() ? "not recorded by `ringtrain prepare`" : s.data_license,
        ".\n\n"
        "The tokenizer is a SentencePiece model (`tokenizer.model`, loaded by `LlamaTokenizer` in\n"
        "legacy mode: no BOS, no prefix space).\n\n```python\n"
        "from transformers import LlamaForCausalLM, LlamaTokenizer\n"
        "tok = LlamaTokenizer.from_pretrained(\"DIR\")  # needs the sentencepiece package\n"
        "model = LlamaForCausalLM.from_pretrained(\"DIR\")\n"
        "ids = tok(\"Việt Nam\", return_tensors=\"pt\").input_ids\n"
        "print(tok.decode(model.generate(ids, max_new_tokens=40, do_sample=False)[0]))\n```\n");
  }
  return absl::StrCat(
      "---\nlibrary_name: transformers\ntags:\n- gpt2\n- ringtrain\n---\n\n# ", s.name, "\n\n",
      absl::StrFormat("A GPT-2 (%d layers, %d heads, width %d, context %d tokens, vocabulary %d) "
                      "trained with ringtrain: %s. Weights in %s.\n\n",
                      c.n_layers, c.n_heads, c.dim, c.seq_len, c.vocab_size, trained,
                      ExportDtypeName(dtype)),
      "Training data licence: ",
      s.data_license.empty() ? "not recorded by `ringtrain prepare`" : s.data_license,
      ".\n\n"
      "The tokenizer is a SentencePiece model (`tokenizer.model`, loaded by `LlamaTokenizer` in\n"
      "legacy mode: no BOS, no prefix space), not GPT-2's byte-level BPE. The context is limited\n"
      "to the learned position table: at most ",
      c.seq_len,
      " tokens.\n\n```python\n"
      "from transformers import GPT2LMHeadModel, LlamaTokenizer\n"
      "tok = LlamaTokenizer.from_pretrained(\"DIR\")  # needs the sentencepiece package\n"
      "model = GPT2LMHeadModel.from_pretrained(\"DIR\")\n"
      "ids = tok(\"Việt Nam\", return_tensors=\"pt\").input_ids\n"
      "print(tok.decode(model.generate(ids, max_new_tokens=40, do_sample=False)[0]))\n```\n");
}

}  // namespace

const std::vector<std::string>& HuggingFaceFileNames() {
  static const std::vector<std::string> names = {
      "model.safetensors", "config.json",           "generation_config.json",
      "tokenizer.model",   "tokenizer_config.json", "special_tokens_map.json",
      "README.md"};
  return names;
}

absl::Status WriteHuggingFaceModel(const PreparedModel& model, ExportDtype dtype,
                                   const std::string& dir) {
  const ModelSource& s = *model.source;
  SafetensorsWriter weights({{"format", "pt"},
                             {"ringtrain.step", absl::StrCat(s.step)},
                             {"ringtrain.tokens", absl::StrCat(s.tokens_trained)}});
  AddWeights(model, dtype, &weights);
  {
    ASSIGN_OR_RETURN(FileSink sink, FileSink::Create(dir + "/model.safetensors"));
    RETURN_IF_ERROR(weights.Write(&sink));
    RETURN_IF_ERROR(sink.Finish());
  }
  RETURN_IF_ERROR(WriteNewFile(dir + "/config.json", ConfigJson(model, dtype)));
  RETURN_IF_ERROR(WriteNewFile(dir + "/generation_config.json", GenerationConfigJson(model)));
  RETURN_IF_ERROR(WriteNewFile(dir + "/tokenizer.model", s.tokenizer_model));
  RETURN_IF_ERROR(WriteNewFile(dir + "/tokenizer_config.json", TokenizerConfigJson(model)));
  RETURN_IF_ERROR(WriteNewFile(dir + "/special_tokens_map.json", SpecialTokensMapJson(model)));
  return WriteNewFile(dir + "/README.md", ModelCard(model, dtype));
}

}  // namespace rt::exporter
