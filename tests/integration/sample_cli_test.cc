// `ringtrain sample` as a comparison tool: --temperature 0 is exact greedy decoding
// (the argmax of the printed logits, independent of seed and top-k), --prompt-ids
// gives the same result as the text it encodes, --json prints what other
// implementations compare against, and misused flags give clear errors.
#include <doctest/doctest.h>

#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "cli_runner.h"

namespace {

using rt::integration::RunResult;
using rt::integration::RunRingtrain;
using rt::integration::TempDir;

bool Contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

// The numbers of the array "key":[...] in a one-line JSON object (no nesting).
std::vector<double> JsonArray(const std::string& json, const std::string& key) {
  std::vector<double> out;
  const std::string k = "\"" + key + "\":[";
  size_t pos = json.find(k);
  if (pos == std::string::npos) return out;
  pos += k.size();
  const size_t end = json.find(']', pos);
  while (pos < end) {
    char* next = nullptr;
    out.push_back(std::strtod(json.c_str() + pos, &next));
    pos = static_cast<size_t>(next - json.c_str()) + 1;  // past the ','
  }
  return out;
}

// The arrays of "key":[[...],[...]] in a one-line JSON object.
std::vector<std::vector<double>> JsonArrays(const std::string& json, const std::string& key) {
  std::vector<std::vector<double>> out;
  const std::string k = "\"" + key + "\":[";
  size_t pos = json.find(k);
  if (pos == std::string::npos) return out;
  pos += k.size();
  while (pos < json.size() && json[pos] == '[') {
    const size_t end = json.find(']', pos);
    out.push_back(JsonArray("\"x\":" + json.substr(pos, end + 1 - pos), "x"));
    pos = end + 2;  // past "]," or "]]"
  }
  return out;
}

size_t Argmax(const std::vector<double>& v) {
  size_t best = 0;
  for (size_t i = 1; i < v.size(); ++i) {
    if (v[i] > v[best]) best = i;
  }
  return best;
}

std::string JoinIds(const std::vector<double>& ids) {
  std::string s;
  for (double id : ids) s += (s.empty() ? "" : ",") + std::to_string(static_cast<int>(id));
  return s;
}

// A small model trained on a few Vietnamese sentences, shared by the test cases.
const TempDir& TrainedModel() {
  static TempDir dir;
  static bool made = false;
  if (made) return dir;
  made = true;
  {
    std::ofstream text(dir / "vi.txt");
    const char* paragraphs[] = {
        "Hà Nội là thủ đô của nước Cộng hòa Xã hội chủ nghĩa Việt Nam.",
        "Đà Nẵng có 8 quận, huyện và dân số khoảng 1,2 triệu người.",
        "Sông Mê Kông chảy qua sáu quốc gia trước khi đổ ra Biển Đông.",
    };
    for (int r = 0; r < 60; ++r) {
      for (const char* p : paragraphs) text << p << "\n\n";
    }
  }
  RunResult prep = RunRingtrain({"prepare", "--input", dir / "vi.txt", "--out", dir / "data",
                                 "--vocab-size=320", "--val-fraction=0.1", "--threads=1"},
                                dir.path());
  INFO(prep.err);
  REQUIRE(prep.exit_code == 0);
  RunResult tr =
      RunRingtrain({"train", "--data", dir / "data", "--steps=40", "--ckpt-dir", dir / "ckpt",
                    "--eval-every=0", "--layers=2", "--heads=2", "--dim=32", "--seq-len=32",
                    "--batch=4", "--precision=fp32", "--threads=1", "--warmup=0", "--lr=3e-3"},
                   dir.path());
  INFO(tr.err);
  REQUIRE(tr.exit_code == 0);
  return dir;
}

RunResult Sample(const std::vector<std::string>& extra) {
  const TempDir& dir = TrainedModel();
  std::vector<std::string> args = {"sample", "--ckpt", dir / "ckpt", "--precision=fp32"};
  args.insert(args.end(), extra.begin(), extra.end());
  return RunRingtrain(args, dir.path());
}

}  // namespace

TEST_CASE("sample --temperature 0 --json: each id is the argmax of its logits") {
  RunResult r =
      Sample({"--prompt", "Đà Nẵng có", "--temperature=0", "--tokens=12", "--json", "--logits"});
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  const std::vector<double> prompt = JsonArray(r.out, "prompt_ids");
  const std::vector<double> ids = JsonArray(r.out, "ids");
  const std::vector<std::vector<double>> logits = JsonArrays(r.out, "logits");
  REQUIRE(!prompt.empty());
  REQUIRE(!ids.empty());
  REQUIRE(logits.size() == ids.size());
  for (size_t k = 0; k < ids.size(); ++k) {
    REQUIRE(logits[k].size() == 320);
    CHECK(ids[k] == Argmax(logits[k]));
  }
  CHECK(Contains(r.out, "\"text\":\"Đà Nẵng có"));
  CHECK(Contains(r.out, "\"precision\":\"fp32\""));

  // --prompt-ids of a prefix and --tokens 0 give the logits of the next step exactly.
  std::vector<double> context = prompt;
  context.insert(context.end(), ids.begin(), ids.begin() + 3);
  RunResult step = Sample({"--prompt-ids", JoinIds(context), "--tokens=0", "--json", "--logits"});
  REQUIRE(step.exit_code == 0);
  CHECK(JsonArray(step.out, "ids").empty());
  const std::vector<std::vector<double>> next = JsonArrays(step.out, "logits");
  REQUIRE(next.size() == 1);
  CHECK(next[0] == logits[3]);

  // Greedy ignores the seed and top-k; --prompt-ids of the encoded prompt is the same.
  RunResult again = Sample({"--prompt-ids", JoinIds(prompt), "--temperature=0", "--tokens=12",
                            "--json", "--seed=99", "--top-k=3"});
  REQUIRE(again.exit_code == 0);
  CHECK(JsonArray(again.out, "ids") == ids);
}

TEST_CASE("sample: misused comparison flags give clear errors") {
  RunResult a = Sample({"--prompt", "x", "--logits"});
  CHECK(a.exit_code == 1);
  CHECK(Contains(a.err, "--logits needs --json"));
  RunResult b = Sample({"--prompt", "x", "--prompt-ids", "1,2"});
  CHECK(b.exit_code == 1);
  CHECK(Contains(b.err, "not both"));
  RunResult c = Sample({"--prompt-ids", "1,x,2"});
  CHECK(c.exit_code == 1);
  CHECK(Contains(c.err, "'x' is not a token id"));
  RunResult d = Sample({"--prompt-ids", "5,320"});
  CHECK(d.exit_code == 1);
  CHECK(Contains(d.err, "id 320 is outside the vocabulary [0, 320)"));
}
