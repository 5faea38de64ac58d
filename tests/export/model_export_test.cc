// The GGUF and Hugging Face writers on a random model: every tensor lands under its
// llama.cpp / transformers name with the right shape, orientation and dtype (values
// compared with the flat parameter buffer), the vocabulary and special ids go in as
// llama.cpp's SentencePiece tokenizer expects, and bad models are refused clearly.
#include <doctest/doctest.h>

#include <cstring>
#include <random>

#include "core/bf16.h"
#include "data/tokenizer.h"
#include "export/gguf_export.h"
#include "export/hf_export.h"
#include "export/model_source.h"
#include "export_test_util.h"

using rt::exporter::ExportDtype;
using rt::exporter::ModelSource;
using rt::exporter::PrepareModel;
using rt::exporter::testing::GgufFile;
using rt::exporter::testing::ReadFile;
using rt::exporter::testing::TempDir;

namespace {

struct RandomModel {
  ModelSource source;
  std::vector<float> params;
  explicit RandomModel(int vocab_extra = 0) {
    const std::string& tok = rt::exporter::testing::SmallTokenizerModel();
    auto t = rt::data::Tokenizer::FromSerialized(tok);
    REQUIRE(t.ok());
    source.config.vocab_size = t->vocab_size() + vocab_extra;
    source.config.n_layers = 2;
    source.config.n_heads = 2;
    source.config.dim = 16;
    source.config.seq_len = 8;
    rt::model::ParamLayout layout(source.config);
    params.resize(layout.total_floats());
    std::mt19937 rng(15);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    for (float& p : params) p = normal(rng);
    source.params = params;
    source.tokenizer_model = tok;
    source.eot_id = t->eot_id();
    source.step = 123;
    source.tokens_trained = 123 * 8 * 8;
    source.name = "test-model";
    source.data_license = "CC BY-SA 3.0";
    source.data_fingerprint = "abcd";
  }
  std::vector<float> Tensor(size_t offset, size_t count) const {
    return std::vector<float>(params.begin() + offset, params.begin() + offset + count);
  }
};

}  // namespace

TEST_CASE(
    "GGUF f32: gpt2 tensors equal the flat buffer, keys and vocabulary as llama.cpp reads them") {
  RandomModel m;
  auto prepared = PrepareModel(m.source, ExportDtype::kF32);
  REQUIRE(prepared.ok());
  CHECK(prepared->warnings.empty());
  TempDir dir;
  REQUIRE(rt::exporter::WriteGgufModel(*prepared, ExportDtype::kF32, dir / "m.gguf").ok());
  GgufFile g = GgufFile::Parse(ReadFile(dir / "m.gguf"));
  const auto& c = m.source.config;
  const rt::model::ParamLayout& L = prepared->layout;
  const int64_t C = c.dim, V = c.vocab_size;
  CHECK(g.kv["general.architecture"].s == "gpt2");
  CHECK(g.kv["general.name"].s == "test-model");
  CHECK(g.kv["general.file_type"].u == 0);
  CHECK(g.kv["gpt2.context_length"].u == 8);
  CHECK(g.kv["gpt2.embedding_length"].u == 16);
  CHECK(g.kv["gpt2.feed_forward_length"].u == 64);
  CHECK(g.kv["gpt2.block_count"].u == 2);
  CHECK(g.kv["gpt2.attention.head_count"].u == 2);
  CHECK(static_cast<float>(g.kv["gpt2.attention.layer_norm_epsilon"].f) == 1e-5f);
  CHECK(g.kv["ringtrain.step"].u == 123);
  CHECK(g.kv["ringtrain.data.license"].s == "CC BY-SA 3.0");
  CHECK(g.kv["general.description"].s.find("on data licensed CC BY-SA 3.0") != std::string::npos);
  // Vocabulary: SentencePiece's pieces, scores and types; special ids; no BOS added.
  CHECK(g.kv["tokenizer.ggml.model"].s == "llama");
  const auto& tokens = g.kv["tokenizer.ggml.tokens"].array;
  REQUIRE(static_cast<int64_t>(tokens.size()) == V);
  for (int64_t id = 0; id < V; ++id) {
    CHECK(tokens[id].s == prepared->vocab.pieces[id].text);
    CHECK(g.kv["tokenizer.ggml.token_type"].array[id].i ==
          static_cast<int>(prepared->vocab.pieces[id].type));
    CHECK(static_cast<float>(g.kv["tokenizer.ggml.scores"].array[id].f) ==
          prepared->vocab.pieces[id].score);
  }
  CHECK(tokens[m.source.eot_id].s == "<|endoftext|>");
  CHECK(g.kv["tokenizer.ggml.token_type"].array[m.source.eot_id].i == 3);
  CHECK(g.kv["tokenizer.ggml.token_type"].array[3].i == 6);  // <0x00>: byte
  CHECK(g.kv["tokenizer.ggml.bos_token_id"].u == static_cast<uint64_t>(m.source.eot_id));
  CHECK(g.kv["tokenizer.ggml.eos_token_id"].u == static_cast<uint64_t>(m.source.eot_id));
  CHECK(g.kv["tokenizer.ggml.unknown_token_id"].u == 0);
  CHECK(g.kv["tokenizer.ggml.add_bos_token"].u == 0);
  CHECK(g.kv["tokenizer.ggml.add_space_prefix"].u == 0);
  // Tensors: 2 embeddings + 12 per block + output norm; no output.weight (tied).
  CHECK(g.tensors.size() == 2 + 12 * 2 + 2);
  CHECK(g.tensors.count("output.weight") == 0);
  CHECK(g.tensors["token_embd.weight"].ne == std::vector<uint64_t>{16, static_cast<uint64_t>(V)});
  CHECK(g.F32("token_embd.weight") == m.Tensor(L.wte(), V * C));
  CHECK(g.F32("position_embd.weight") == m.Tensor(L.wpe(), 8 * C));
  const auto& o = L.block();
  const size_t b1 = L.block_begin(1);
  CHECK(g.tensors["blk.1.attn_qkv.weight"].ne == std::vector<uint64_t>{16, 48});
  CHECK(g.F32("blk.1.attn_qkv.weight") == m.Tensor(b1 + o.qkv_w, 3 * C * C));
  CHECK(g.F32("blk.1.attn_qkv.bias") == m.Tensor(b1 + o.qkv_b, 3 * C));
  CHECK(g.F32("blk.1.attn_output.weight") == m.Tensor(b1 + o.attproj_w, C * C));
  CHECK(g.F32("blk.1.attn_norm.weight") == m.Tensor(b1 + o.ln1_w, C));
  CHECK(g.F32("blk.1.ffn_norm.bias") == m.Tensor(b1 + o.ln2_b, C));
  CHECK(g.tensors["blk.1.ffn_up.weight"].ne == std::vector<uint64_t>{16, 64});
  CHECK(g.F32("blk.1.ffn_up.weight") == m.Tensor(b1 + o.fc_w, 4 * C * C));
  CHECK(g.tensors["blk.1.ffn_down.weight"].ne == std::vector<uint64_t>{64, 16});
  CHECK(g.F32("blk.1.ffn_down.weight") == m.Tensor(b1 + o.fcproj_w, 4 * C * C));
  CHECK(g.F32("blk.1.ffn_down.bias") == m.Tensor(b1 + o.fcproj_b, C));
  CHECK(g.F32("output_norm.weight") == m.Tensor(L.lnf_w(), C));
  CHECK(g.F32("output_norm.bias") == m.Tensor(L.lnf_b(), C));
}

TEST_CASE("GGUF f16 / bf16: matrices in that type, vectors in f32") {
  RandomModel m;
  for (ExportDtype dtype : {ExportDtype::kF16, ExportDtype::kBf16}) {
    auto prepared = PrepareModel(m.source, dtype);
    REQUIRE(prepared.ok());
    TempDir dir;
    REQUIRE(rt::exporter::WriteGgufModel(*prepared, dtype, dir / "m.gguf").ok());
    GgufFile g = GgufFile::Parse(ReadFile(dir / "m.gguf"));
    const uint32_t type = dtype == ExportDtype::kF16 ? 1 : 30;
    CHECK(g.kv["general.file_type"].u == (dtype == ExportDtype::kF16 ? 1u : 32u));
    CHECK(g.tensors["token_embd.weight"].type == type);
    CHECK(g.tensors["blk.0.attn_qkv.weight"].type == type);
    CHECK(g.tensors["blk.0.attn_qkv.bias"].type == 0);
    CHECK(g.tensors["blk.0.attn_norm.weight"].type == 0);
    const std::vector<uint16_t> wte = g.U16("token_embd.weight");
    const float w0 = m.params[prepared->layout.wte() + 5];
    CHECK(wte[5] ==
          (dtype == ExportDtype::kF16 ? rt::exporter::FloatToHalf(w0) : rt::FloatToBf16(w0)));
  }
}

TEST_CASE("Hugging Face: Conv1D weights are the transposes, the rest as stored") {
  RandomModel m;
  auto prepared = PrepareModel(m.source, ExportDtype::kF32);
  REQUIRE(prepared.ok());
  TempDir dir;
  REQUIRE(rt::exporter::WriteHuggingFaceModel(*prepared, ExportDtype::kF32, dir.path()).ok());
  for (const std::string& f : rt::exporter::HuggingFaceFileNames()) {
    CHECK(std::filesystem::exists(dir / f));
  }
  const std::string st = ReadFile(dir / "model.safetensors");
  uint64_t n;
  std::memcpy(&n, st.data(), 8);
  CHECK((8 + n) % 8 == 0);
  const std::string header = st.substr(8, n);
  const std::string data = st.substr(8 + n);
  // The byte range of a tensor, from its header entry.
  auto range = [&](const std::string& name) {
    const size_t at = header.find("\"" + name + "\":");
    REQUIRE(at != std::string::npos);
    const size_t offsets = header.find("\"data_offsets\":[", at) + 16;
    const uint64_t begin = std::stoull(header.substr(offsets));
    const uint64_t end = std::stoull(header.substr(header.find(',', offsets) + 1));
    std::vector<float> v((end - begin) / 4);
    std::memcpy(v.data(), data.data() + begin, end - begin);
    return v;
  };
  CHECK(header.find("\"__metadata__\":{\"format\":\"pt\"") != std::string::npos);
  CHECK(
      header.find("\"transformer.h.0.attn.c_attn.weight\":{\"dtype\":\"F32\",\"shape\":[16,48]") !=
      std::string::npos);
  CHECK(header.find("lm_head") == std::string::npos);
  const rt::model::ParamLayout& L = prepared->layout;
  const size_t b0 = L.block_begin(0);
  const std::vector<float> qkv = range("transformer.h.0.attn.c_attn.weight");    // (C, 3C)
  const std::vector<float> fcproj = range("transformer.h.0.mlp.c_proj.weight");  // (4C, C)
  const int C = 16;
  for (int out = 0; out < 3 * C; ++out) {
    for (int in = 0; in < C; ++in) {
      REQUIRE(qkv[in * 3 * C + out] == m.params[b0 + L.block().qkv_w + out * C + in]);
    }
  }
  for (int out = 0; out < C; ++out) {
    for (int in = 0; in < 4 * C; ++in) {
      REQUIRE(fcproj[in * C + out] == m.params[b0 + L.block().fcproj_w + out * 4 * C + in]);
    }
  }
  CHECK(range("transformer.wte.weight") == m.Tensor(L.wte(), L.tensors()[0].count));
  CHECK(range("transformer.h.0.ln_1.bias") == m.Tensor(b0 + L.block().ln1_b, C));
  const std::string config = ReadFile(dir / "config.json");
  CHECK(config.find("\"n_layer\": 2") != std::string::npos);
  CHECK(config.find("\"eos_token_id\": " + std::to_string(m.source.eot_id)) != std::string::npos);
  CHECK(ReadFile(dir / "tokenizer.model") == m.source.tokenizer_model);
  CHECK(ReadFile(dir / "tokenizer_config.json").find("\"eos_token\": \"<|endoftext|>\"") !=
        std::string::npos);
  CHECK(ReadFile(dir / "README.md").find("Training data licence: CC BY-SA 3.0.") !=
        std::string::npos);
}

TEST_CASE("PrepareModel: a larger model vocabulary is padded, bad models are refused") {
  RandomModel padded(5);
  auto p = PrepareModel(padded.source, ExportDtype::kF32);
  REQUIRE(p.ok());
  const int V = padded.source.config.vocab_size;
  REQUIRE(static_cast<int>(p->vocab.pieces.size()) == V);
  CHECK(p->vocab.pieces[V - 1].text == "<unused_" + std::to_string(V - 1) + ">");
  CHECK(p->vocab.pieces[V - 1].type == rt::exporter::PieceType::kUnused);

  RandomModel small(0);
  small.source.config.vocab_size -= 1;
  small.params.resize(rt::model::ParamLayout(small.source.config).total_floats());
  small.source.params = small.params;
  auto too_small = PrepareModel(small.source, ExportDtype::kF32);
  CHECK(too_small.status().code() == absl::StatusCode::kFailedPrecondition);
  CHECK(std::string(too_small.status().message()).find("the tokenizer has") == 0);

  RandomModel big;
  big.params[big.params.size() / 2] = 70000.0f;
  auto f16 = PrepareModel(big.source, ExportDtype::kF16);
  REQUIRE(!f16.ok());
  CHECK(std::string(f16.status().message()).find("beyond f16's 65504: export with --dtype bf16") !=
        std::string::npos);
  CHECK(PrepareModel(big.source, ExportDtype::kBf16).ok());

  RandomModel no_tok;
  no_tok.source.tokenizer_model.clear();
  CHECK(PrepareModel(no_tok.source, ExportDtype::kF32).status().code() ==
        absl::StatusCode::kFailedPrecondition);
  RandomModel bad_tok;
  bad_tok.source.tokenizer_model = "garbage";
  CHECK(PrepareModel(bad_tok.source, ExportDtype::kF32).status().code() ==
        absl::StatusCode::kDataLoss);
  RandomModel short_params;
  short_params.source.params = short_params.source.params.subspan(1);
  CHECK(PrepareModel(short_params.source, ExportDtype::kF32).status().code() ==
        absl::StatusCode::kInvalidArgument);
}
