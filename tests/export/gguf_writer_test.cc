// GgufWriter: the file parses back (strict test reader) with every key, type and value
// in order, tensor infos with ggml's dimension order, 32-byte aligned data equal to
// what the callbacks produced; duplicates and wrongly sized tensors are refused.
#include "export/gguf_writer.h"

#include <doctest/doctest.h>

#include <cstring>

#include "export_test_util.h"

using rt::exporter::FileSink;
using rt::exporter::GgmlType;
using rt::exporter::GgufWriter;
using rt::exporter::testing::GgufFile;
using rt::exporter::testing::ReadFile;
using rt::exporter::testing::TempDir;

namespace {

std::function<void(std::string*)> Floats(std::vector<float> v) {
  return
      [v](std::string* out) { out->append(reinterpret_cast<const char*>(v.data()), v.size() * 4); };
}

absl::Status WriteTo(const GgufWriter& g, const std::string& path) {
  absl::StatusOr<FileSink> sink = FileSink::Create(path);
  if (!sink.ok()) return sink.status();
  absl::Status st = g.Write(&*sink);
  if (!st.ok()) return st;
  return sink->Finish();
}

}  // namespace

TEST_CASE("a GGUF file parses back with its keys, tensors and aligned data") {
  TempDir dir;
  GgufWriter g;
  g.AddString("general.architecture", "gpt2");
  g.AddUint32("gpt2.block_count", 3);
  g.AddFloat32("gpt2.attention.layer_norm_epsilon", 1e-5f);
  g.AddBool("tokenizer.ggml.add_bos_token", false);
  g.AddUint64("ringtrain.tokens", 1ull << 40);
  g.AddStringArray("tokenizer.ggml.tokens", {"<unk>", "▁Việt", "\n", ""});
  g.AddFloat32Array("tokenizer.ggml.scores", {0.0f, -1.5f, 2.0f, 0.25f});
  g.AddInt32Array("tokenizer.ggml.token_type", {2, 1, 4, -7});
  g.AddTensor("a", {3, 2}, GgmlType::kF32, Floats({1, 2, 3, 4, 5, 6}));  // 24 bytes: padded
  g.AddTensor("b", {5}, GgmlType::kF16, [](std::string* out) { out->append(10, '\x11'); });
  g.AddTensor("c", {1}, GgmlType::kF32, Floats({-9}));
  REQUIRE(WriteTo(g, dir / "m.gguf").ok());
  const std::string bytes = ReadFile(dir / "m.gguf");
  CHECK(bytes.size() == g.FileBytes());
  CHECK(bytes.size() % 32 == 0);
  GgufFile f = GgufFile::Parse(bytes);
  CHECK(f.version == 3);
  CHECK(f.key_order == std::vector<std::string>{"general.architecture", "gpt2.block_count",
                                                "gpt2.attention.layer_norm_epsilon",
                                                "tokenizer.ggml.add_bos_token", "ringtrain.tokens",
                                                "tokenizer.ggml.tokens", "tokenizer.ggml.scores",
                                                "tokenizer.ggml.token_type"});
  CHECK(f.kv["general.architecture"].type == 8);
  CHECK(f.kv["general.architecture"].s == "gpt2");
  CHECK(f.kv["gpt2.block_count"].type == 4);
  CHECK(f.kv["gpt2.block_count"].u == 3);
  CHECK(f.kv["gpt2.attention.layer_norm_epsilon"].type == 6);
  CHECK(static_cast<float>(f.kv["gpt2.attention.layer_norm_epsilon"].f) == 1e-5f);
  CHECK(f.kv["tokenizer.ggml.add_bos_token"].type == 7);
  CHECK(f.kv["tokenizer.ggml.add_bos_token"].u == 0);
  CHECK(f.kv["ringtrain.tokens"].type == 10);
  CHECK(f.kv["ringtrain.tokens"].u == (1ull << 40));
  const auto& tokens = f.kv["tokenizer.ggml.tokens"];
  REQUIRE(tokens.array_type == 8);
  REQUIRE(tokens.array.size() == 4);
  CHECK(tokens.array[1].s == "▁Việt");
  CHECK(tokens.array[2].s == "\n");
  CHECK(tokens.array[3].s.empty());
  CHECK(f.kv["tokenizer.ggml.scores"].array_type == 6);
  CHECK(f.kv["tokenizer.ggml.scores"].array[1].f == -1.5);
  CHECK(f.kv["tokenizer.ggml.token_type"].array_type == 5);
  CHECK(f.kv["tokenizer.ggml.token_type"].array[3].i == -7);
  CHECK(f.tensor_order == std::vector<std::string>{"a", "b", "c"});
  CHECK(f.tensors["a"].ne == std::vector<uint64_t>{3, 2});
  CHECK(f.tensors["a"].type == 0);
  CHECK(f.tensors["b"].type == 1);
  CHECK(f.F32("a") == std::vector<float>{1, 2, 3, 4, 5, 6});
  CHECK(f.U16("b") == std::vector<uint16_t>(5, 0x1111));
  CHECK(f.F32("c") == std::vector<float>{-9});
  // Data offsets are 32-aligned relative to the aligned end of the header.
  CHECK(f.tensors["b"].offset - f.tensors["a"].offset == 32);
  // Padding between tensors is zero.
  CHECK(bytes.substr(f.tensors["a"].offset + 24, 8) == std::string(8, '\0'));
}

TEST_CASE("GGUF: duplicate keys, duplicate tensors and wrongly sized data are refused") {
  TempDir dir;
  GgufWriter dup_key;
  dup_key.AddUint32("x", 1);
  dup_key.AddUint32("x", 2);
  absl::Status st = WriteTo(dup_key, dir / "a.gguf");
  CHECK(st.code() == absl::StatusCode::kInvalidArgument);
  CHECK(std::string(st.message()) == "GGUF: duplicate key x");

  GgufWriter dup_tensor;
  dup_tensor.AddTensor("t", {1}, GgmlType::kF32, Floats({1}));
  dup_tensor.AddTensor("t", {1}, GgmlType::kF32, Floats({2}));
  CHECK(std::string(WriteTo(dup_tensor, dir / "b.gguf").message()) == "GGUF: duplicate tensor t");

  GgufWriter short_data;
  short_data.AddTensor("t", {4}, GgmlType::kF32, Floats({1, 2, 3}));
  CHECK(std::string(WriteTo(short_data, dir / "c.gguf").message()) ==
        "GGUF: tensor t produced 12 bytes, expected 16");
}
