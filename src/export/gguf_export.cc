// GGUF writer for the gpt2 and llama architectures (see header for tensors and keys).
#include "export/gguf_export.h"

#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/status_macros.h"
#include "export/gguf_writer.h"

namespace rt::exporter {
namespace {

void AddHyperparameters(const PreparedModel& m, ExportDtype dtype, GgufWriter* g) {
  const ModelSource& s = *m.source;
  const model::GptConfig& c = s.config;
  const bool llama = c.arch == model::Arch::kLlama;
  g->AddString("general.architecture", llama ? "llama" : "gpt2");
  g->AddString("general.type", "model");
  g->AddString("general.name", s.name);
  std::string description = absl::StrFormat(
      "%s (%d layers, width %d, %d heads, context %d) trained with ringtrain for %d steps",
      llama ? "Llama-style" : "GPT-2", c.n_layers, c.dim, c.n_heads, c.seq_len, s.step);
  if (s.tokens_trained > 0) absl::StrAppend(&description, " (", s.tokens_trained, " tokens)");
  if (!s.data_license.empty()) {
    absl::StrAppend(&description, " on data licensed ", s.data_license);
  }
  g->AddString("general.description", description);
  const uint32_t file_type = dtype == ExportDtype::kF32 ? 0 : dtype == ExportDtype::kF16 ? 1 : 32;
  g->AddUint32("general.file_type", file_type);
  if (llama) {
    const uint32_t hs = static_cast<uint32_t>(c.dim / c.n_heads);
    g->AddUint32("llama.context_length", static_cast<uint32_t>(c.seq_len));
    g->AddUint32("llama.embedding_length", static_cast<uint32_t>(c.dim));
    g->AddUint32("llama.feed_forward_length", static_cast<uint32_t>(c.Hidden()));
    g->AddUint32("llama.block_count", static_cast<uint32_t>(c.n_layers));
    g->AddUint32("llama.attention.head_count", static_cast<uint32_t>(c.n_heads));
    g->AddUint32("llama.attention.head_count_kv", static_cast<uint32_t>(c.n_heads));
    g->AddFloat32("llama.rope.freq_base", c.rope_theta);
    g->AddUint32("llama.rope.dimension_count", hs);
    g->AddFloat32("llama.attention.layer_norm_rms_epsilon", model::kRmsNormEpsilon);
    g->AddUint32("llama.vocab_size", static_cast<uint32_t>(c.vocab_size));
    return;
  }
  g->AddUint32("gpt2.context_length", static_cast<uint32_t>(c.seq_len));
  g->AddUint32("gpt2.embedding_length", static_cast<uint32_t>(c.dim));
  g->AddUint32("gpt2.feed_forward_length", static_cast<uint32_t>(4 * c.dim));
  g->AddUint32("gpt2.block_count", static_cast<uint32_t>(c.n_layers));
  g->AddUint32("gpt2.attention.head_count", static_cast<uint32_t>(c.n_heads));
  g->AddFloat32("gpt2.attention.layer_norm_epsilon", model::kLayerNormEpsilon);
}

void AddVocabulary(const PreparedModel& m, GgufWriter* g) {
  std::vector<std::string> tokens;
  std::vector<float> scores;
  std::vector<int32_t> types;
  int unknown = -1;
  for (size_t i = 0; i < m.vocab.pieces.size(); ++i) {
    const SpmPiece& p = m.vocab.pieces[i];
    tokens.push_back(p.text);
    scores.push_back(p.score);
    types.push_back(static_cast<int32_t>(p.type));
    if (p.type == PieceType::kUnknown && unknown < 0) unknown = static_cast<int>(i);
  }
  g->AddString("tokenizer.ggml.model", "llama");
  g->AddStringArray("tokenizer.ggml.tokens", tokens);
  g->AddFloat32Array("tokenizer.ggml.scores", scores);
  g->AddInt32Array("tokenizer.ggml.token_type", types);
  const int eot = m.source->eot_id;
  if (eot >= 0) {
    g->AddUint32("tokenizer.ggml.bos_token_id", static_cast<uint32_t>(eot));
    g->AddUint32("tokenizer.ggml.eos_token_id", static_cast<uint32_t>(eot));
  }
  if (unknown >= 0) g->AddUint32("tokenizer.ggml.unknown_token_id", static_cast<uint32_t>(unknown));
  g->AddBool("tokenizer.ggml.add_bos_token", false);
  g->AddBool("tokenizer.ggml.add_eos_token", false);
  g->AddBool("tokenizer.ggml.add_space_prefix", m.vocab.add_dummy_prefix);
  g->AddBool("tokenizer.ggml.remove_extra_whitespaces", m.vocab.remove_extra_whitespaces);
}

void AddTrainingFacts(const PreparedModel& m, GgufWriter* g) {
  const ModelSource& s = *m.source;
  g->AddUint64("ringtrain.step", static_cast<uint64_t>(s.step));
  g->AddUint64("ringtrain.tokens", static_cast<uint64_t>(s.tokens_trained));
  if (!s.data_fingerprint.empty()) g->AddString("ringtrain.data.fingerprint", s.data_fingerprint);
  if (!s.data_license.empty()) g->AddString("ringtrain.data.license", s.data_license);
}

void AddTensors(const PreparedModel& m, ExportDtype dtype, GgufWriter* g) {
  const model::GptConfig& c = m.source->config;
  const int64_t V = c.vocab_size, T = c.seq_len, C = c.dim;
  const GgmlType matrix_type = dtype == ExportDtype::kF32   ? GgmlType::kF32
                               : dtype == ExportDtype::kF16 ? GgmlType::kF16
                                                            : GgmlType::kBf16;
  // ne = {in (contiguous), out}: ringtrain's (out, in) row-major matrices as they are.
  auto add = [&m, g](const std::string& name, std::vector<int64_t> ne, GgmlType type,
                     ExportDtype encode_as, size_t offset) {
    size_t count = 1;
    for (int64_t d : ne) count *= static_cast<size_t>(d);
    absl::Span<const float> values = m.Tensor(offset, count);
    g->AddTensor(name, std::move(ne), type,
                 [values, encode_as](std::string* out) { AppendEncoded(values, encode_as, out); });
  };
  auto matrix = [&](const std::string& name, int64_t in, int64_t out, size_t offset) {
    add(name, {in, out}, matrix_type, dtype, offset);
  };
  auto vector = [&](const std::string& name, int64_t n, size_t offset) {
    add(name, {n}, GgmlType::kF32, ExportDtype::kF32, offset);
  };
  const model::ParamLayout& L = m.layout;
  if (c.arch == model::Arch::kLlama) {
    // q and k rows in llama.cpp's interleaved RoPE order (model_source.h).
    const int64_t NH = c.n_heads, hs = C / NH, H = c.Hidden();
    auto rope_matrix = [&](const std::string& name, size_t offset) {
      auto values = std::make_shared<std::vector<float>>(
          InterleaveRopeRows(m.Tensor(offset, static_cast<size_t>(C * C)), NH, hs, C));
      g->AddTensor(name, {C, C}, matrix_type,
                   [values, dtype](std::string* out) { AppendEncoded(*values, dtype, out); });
    };
    matrix("token_embd.weight", C, V, L.wte());
    const model::BlockOffsets& o = L.block();
    for (int l = 0; l < c.n_layers; ++l) {
      const size_t b = L.block_begin(l);
      const std::string p = absl::StrCat("blk.", l, ".");
      vector(p + "attn_norm.weight", C, b + o.ln1_w);
      rope_matrix(p + "attn_q.weight", b + o.qkv_w);
      rope_matrix(p + "attn_k.weight", b + o.qkv_w + C * C);
      matrix(p + "attn_v.weight", C, C, b + o.qkv_w + 2 * C * C);
      matrix(p + "attn_output.weight", C, C, b + o.attproj_w);
      vector(p + "ffn_norm.weight", C, b + o.ln2_w);
      matrix(p + "ffn_gate.weight", C, H, b + o.fc_w);
      matrix(p + "ffn_up.weight", C, H, b + o.fc_w + H * C);
      matrix(p + "ffn_down.weight", H, C, b + o.fcproj_w);
    }
    vector("output_norm.weight", C, L.lnf_w());
    if (c.untied) matrix("output.weight", C, V, L.lm_head());
    return;
  }
  matrix("token_embd.weight", C, V, L.wte());
  matrix("position_embd.weight", C, T, L.wpe());
  const model::BlockOffsets& o = L.block();
  for (int l = 0; l < c.n_layers; ++l) {
    const size_t b = L.block_begin(l);
    const std::string p = absl::StrCat("blk.", l, ".");
    vector(p + "attn_norm.weight", C, b + o.ln1_w);
    vector(p + "attn_norm.bias", C, b + o.ln1_b);
    matrix(p + "attn_qkv.weight", C, 3 * C, b + o.qkv_w);
    vector(p + "attn_qkv.bias", 3 * C, b + o.qkv_b);
    matrix(p + "attn_output.weight", C, C, b + o.attproj_w);
    vector(p + "attn_output.bias", C, b + o.attproj_b);
    vector(p + "ffn_norm.weight", C, b + o.ln2_w);
    vector(p + "ffn_norm.bias", C, b + o.ln2_b);
    matrix(p + "ffn_up.weight", C, 4 * C, b + o.fc_w);
    vector(p + "ffn_up.bias", 4 * C, b + o.fc_b);
    matrix(p + "ffn_down.weight", 4 * C, C, b + o.fcproj_w);
    vector(p + "ffn_down.bias", C, b + o.fcproj_b);
  }
  vector("output_norm.weight", C, L.lnf_w());
  vector("output_norm.bias", C, L.lnf_b());
}

}  // namespace

absl::Status WriteGgufModel(const PreparedModel& model, ExportDtype dtype,
                            const std::string& path) {
  GgufWriter g;
  AddHyperparameters(model, dtype, &g);
  AddVocabulary(model, &g);
  AddTrainingFacts(model, &g);
  AddTensors(model, dtype, &g);
  ASSIGN_OR_RETURN(FileSink sink, FileSink::Create(path));
  RETURN_IF_ERROR(g.Write(&sink));
  return sink.Finish();
}

}  // namespace rt::exporter
