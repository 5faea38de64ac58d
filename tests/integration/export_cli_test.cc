// `ringtrain export` as a user runs it, on checkpoints written the way train writes
// them: both formats succeed and say what they wrote; an existing output is kept
// without --force; a corrupt, empty or missing checkpoint, a checkpoint without a
// tokenizer, an unwritable or missing output directory and bad flags give a clear
// message, exit 1 and leave no partial output (no file, no staging entry).
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "cli_runner.h"
#include "data/tokenizer.h"
#include "data/tokenizer_trainer.h"
#include "model/param_layout.h"
#include "train/train_checkpoint.h"

namespace {

using rt::integration::ReadFile;
using rt::integration::RunResult;
using rt::integration::RunRingtrain;
using rt::integration::TempDir;

bool Contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

std::vector<std::string> Entries(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    names.push_back(e.path().filename().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

const std::string& Tokenizer() {
  static const std::string model = [] {
    std::vector<std::string> lines;
    for (int r = 0; r < 40; ++r) {
      lines.push_back("Hà Nội là thủ đô của nước Cộng hòa Xã hội chủ nghĩa Việt Nam.");
      lines.push_back("Đà Nẵng có 8 quận, huyện và dân số khoảng 1,2 triệu người.");
      lines.push_back("Sông Mê Kông chảy qua sáu quốc gia trước khi đổ ra Biển Đông.");
    }
    rt::data::TokenizerTrainOptions o;
    o.vocab_size = 320;
    auto m = rt::data::TrainTokenizer(lines, o);
    INFO(m.status().message());
    REQUIRE(m.ok());
    return *m;
  }();
  return model;
}

// A checkpoint of a tiny model at `step` in ckpt_dir, as train writes it.
void WriteCheckpoint(const std::string& ckpt_dir, int64_t step, bool with_tokenizer = true) {
  auto tok = rt::data::Tokenizer::FromSerialized(Tokenizer());
  REQUIRE(tok.ok());
  rt::model::GptConfig c;
  c.vocab_size = tok->vocab_size();
  c.n_layers = 1;
  c.n_heads = 2;
  c.dim = 16;
  c.seq_len = 16;
  rt::train::TrainConfig config;
  config.steps = 100;
  rt::model::ParamLayout layout(c);
  std::vector<float> params(layout.total_floats()), zeros(layout.total_floats(), 0.0f);
  std::mt19937 rng(static_cast<uint32_t>(step));
  std::normal_distribution<float> normal(0.0f, 0.1f);
  for (float& p : params) p = normal(rng);
  auto fields = rt::train::TrainMetaFields(config, c, 8, "fp", tok->eot_id());
  rt::ckpt::CheckpointMeta meta;
  meta.step = step;
  meta.fields = fields;
  REQUIRE(rt::train::SaveTrainCheckpoint(ckpt_dir, meta, params, zeros, zeros,
                                         with_tokenizer ? Tokenizer() : std::string(), 0)
              .ok());
}

RunResult Export(const TempDir& dir, const std::vector<std::string>& args) {
  std::vector<std::string> all = {"export"};
  all.insert(all.end(), args.begin(), args.end());
  return RunRingtrain(all, dir.path());
}

}  // namespace

TEST_CASE("export writes GGUF and Hugging Face outputs and keeps an existing one without --force") {
  TempDir dir;
  WriteCheckpoint(dir / "ckpt", 40);
  std::filesystem::create_directory(dir / "out");
  RunResult g =
      Export(dir, {"--ckpt", dir / "ckpt", "--out", dir / "out/m.gguf", "--format", "gguf"});
  INFO(g.err);
  REQUIRE(g.exit_code == 0);
  CHECK(Contains(g.out, "wrote " + (dir / "out/m.gguf") + ": GGUF (llama.cpp gpt2), f16 weights"));
  CHECK(Contains(g.out, "step 40"));
  const std::string first = ReadFile(dir / "out/m.gguf");
  CHECK(first.compare(0, 4, "GGUF") == 0);

  RunResult again = Export(dir, {"--ckpt", dir / "ckpt", "--out", dir / "out/m.gguf", "--format",
                                 "gguf", "--dtype", "f32"});
  CHECK(again.exit_code == 1);
  CHECK(Contains(again.err, "already exists (add --force to replace it)"));
  CHECK(ReadFile(dir / "out/m.gguf") == first);
  RunResult forced = Export(dir, {"--ckpt", dir / "ckpt", "--out", dir / "out/m.gguf", "--format",
                                  "gguf", "--dtype", "f32", "--force"});
  CHECK(forced.exit_code == 0);
  CHECK(ReadFile(dir / "out/m.gguf").size() > first.size());  // f32 is twice f16's size

  RunResult hf = Export(dir, {"--ckpt", dir / "ckpt/step-00000040", "--out", dir / "out/hf",
                              "--format", "safetensors"});
  INFO(hf.err);
  REQUIRE(hf.exit_code == 0);
  CHECK(Contains(hf.out, "Hugging Face GPT2LMHeadModel (safetensors), f32 weights"));
  CHECK(Entries(dir / "out/hf").size() == 7);
  // --force never deletes a folder that is not an earlier export.
  std::filesystem::create_directory(dir / "out/notes");
  rt::testing::WriteFile(dir / "out/notes/todo.txt", "mine");
  RunResult foreign = Export(dir, {"--ckpt", dir / "ckpt", "--out", dir / "out/notes", "--format",
                                   "safetensors", "--force"});
  CHECK(foreign.exit_code == 1);
  CHECK(Contains(foreign.err, "holds files an export does not write (todo.txt)"));
  CHECK(ReadFile(dir / "out/notes/todo.txt") == "mine");
  CHECK(Entries(dir / "out") == std::vector<std::string>{"hf", "m.gguf", "notes"});
}

TEST_CASE("export of a corrupt, empty or missing checkpoint: clear errors, no output") {
  TempDir dir;
  std::filesystem::create_directory(dir / "out");
  // The newest checkpoint is damaged: export falls back to the previous good one, saying so.
  WriteCheckpoint(dir / "ckpt", 10);
  WriteCheckpoint(dir / "ckpt", 20);
  std::filesystem::resize_file(dir / "ckpt/step-00000020/params.bin", 100);
  RunResult fallback =
      Export(dir, {"--ckpt", dir / "ckpt", "--out", dir / "out/a.gguf", "--format", "gguf"});
  INFO(fallback.err);
  CHECK(fallback.exit_code == 0);
  CHECK(Contains(fallback.err, "skipping invalid checkpoint: step-00000020"));
  CHECK(Contains(fallback.out, "(step 10,"));

  // The damaged step directory given directly: refused, naming the file.
  RunResult corrupt = Export(
      dir, {"--ckpt", dir / "ckpt/step-00000020", "--out", dir / "out/b.gguf", "--format", "gguf"});
  CHECK(corrupt.exit_code == 1);
  CHECK(Contains(corrupt.err, "params.bin"));
  // Only damaged checkpoints: refused.
  std::filesystem::resize_file(dir / "ckpt/step-00000010/params.bin", 100);
  RunResult all_bad =
      Export(dir, {"--ckpt", dir / "ckpt", "--out", dir / "out/c", "--format", "safetensors"});
  CHECK(all_bad.exit_code == 1);
  CHECK(Contains(all_bad.err, "step-00000010"));

  std::filesystem::create_directory(dir / "empty");
  RunResult empty =
      Export(dir, {"--ckpt", dir / "empty", "--out", dir / "out/d.gguf", "--format", "gguf"});
  CHECK(empty.exit_code == 1);
  CHECK(Contains(empty.err, "ringtrain export: "));
  CHECK(Contains(empty.err, dir / "empty"));
  RunResult missing =
      Export(dir, {"--ckpt", dir / "nowhere", "--out", dir / "out/e.gguf", "--format", "gguf"});
  CHECK(missing.exit_code == 1);
  CHECK(Contains(missing.err, "nowhere"));

  WriteCheckpoint(dir / "synthetic", 5, /*with_tokenizer=*/false);
  RunResult no_tok =
      Export(dir, {"--ckpt", dir / "synthetic", "--out", dir / "out/f.gguf", "--format", "gguf"});
  CHECK(no_tok.exit_code == 1);
  CHECK(Contains(no_tok.err, "holds no tokenizer"));
  // Nothing but the one good export, no staging leftovers.
  CHECK(Entries(dir / "out") == std::vector<std::string>{"a.gguf"});
}

TEST_CASE("export to an unwritable or missing place, or with bad flags: clear errors") {
  TempDir dir;
  WriteCheckpoint(dir / "ckpt", 3);
  std::filesystem::create_directory(dir / "out");
  RunResult proc =
      Export(dir, {"--ckpt", dir / "ckpt", "--out", "/proc/m.gguf", "--format", "gguf"});
  CHECK(proc.exit_code == 1);
  CHECK(Contains(proc.err, "--out /proc/m.gguf: cannot create"));
  RunResult no_dir =
      Export(dir, {"--ckpt", dir / "ckpt", "--out", dir / "no/such/m.gguf", "--format", "gguf"});
  CHECK(no_dir.exit_code == 1);
  CHECK(Contains(no_dir.err, "does not exist (create it first)"));
  RunResult no_format = Export(dir, {"--ckpt", dir / "ckpt", "--out", dir / "out/m.gguf"});
  CHECK(no_format.exit_code == 1);
  CHECK(Contains(no_format.err, "--format gguf|safetensors is required"));
  RunResult bad_format =
      Export(dir, {"--ckpt", dir / "ckpt", "--out", dir / "out/m.onnx", "--format", "onnx"});
  CHECK(Contains(bad_format.err, "--format 'onnx' is not gguf or safetensors"));
  CHECK(bad_format.exit_code == 1);
  RunResult bad_dtype = Export(dir, {"--ckpt", dir / "ckpt", "--out", dir / "out/m.gguf",
                                     "--format", "gguf", "--dtype", "q4"});
  CHECK(Contains(bad_dtype.err, "--dtype 'q4' is not one of f32, f16, bf16"));
  CHECK(bad_dtype.exit_code == 1);
  RunResult no_out = Export(dir, {"--ckpt", dir / "ckpt", "--format", "gguf"});
  CHECK(Contains(no_out.err, "--out PATH is required"));
  CHECK(no_out.exit_code == 1);
  RunResult no_ckpt = Export(dir, {"--out", dir / "out/m.gguf", "--format", "gguf"});
  CHECK(Contains(no_ckpt.err, "--ckpt DIR is required"));
  CHECK(no_ckpt.exit_code == 1);
  RunResult slash =
      Export(dir, {"--ckpt", dir / "ckpt", "--out", dir / "out/", "--format", "gguf"});
  CHECK(Contains(slash.err, "this format writes one file"));
  CHECK(slash.exit_code == 1);
  // Flags the parser refuses, and a stray argument: usage errors, exit 2.
  RunResult unknown = Export(dir, {"--ckpt", dir / "ckpt", "--out", dir / "out/m.gguf", "--format",
                                   "gguf", "--dtipe", "f16"});
  CHECK(Contains(unknown.err, "dtipe"));
  CHECK(unknown.exit_code == 2);
  RunResult stray = Export(
      dir, {"--ckpt", dir / "ckpt", "--out", dir / "out/m.gguf", "--format", "gguf", "extra"});
  CHECK(Contains(stray.err, "unexpected argument 'extra'"));
  CHECK(stray.exit_code == 2);
  CHECK(Entries(dir / "out").empty());
}
