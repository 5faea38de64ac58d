// Implementation of tokenizer training (see tokenizer_trainer.h).
#include "data/tokenizer_trainer.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <unordered_map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "data/spm_bridge.h"
#include "data/tokenizer.h"

namespace rt::data {
namespace {

constexpr int kMetaPieces = 3 + 256;  // unk, eot, "\n", byte pieces
constexpr int kMinMerges = 40;
// SentencePiece's message when the characters to cover do not fit ("... 300 vs 311.").
constexpr char kTooSmall[] = "Vocabulary size is smaller than required_chars.";

// SentencePiece refuses a vocabulary smaller than the pieces needed for the characters
// it must cover. For small vocabularies (tests), lower the coverage so that the most
// frequent characters plus kMinMerges merges fit; rarer characters fall back to bytes.
double CharacterCoverage(const std::vector<std::string>& lines, int vocab_size) {
  constexpr double kDefault = 0.9995;
  std::unordered_map<uint32_t, uint64_t> counts;
  uint64_t total = 0;
  for (const std::string& l : lines) {
    for (size_t i = 0; i < l.size();) {
      const unsigned char c = static_cast<unsigned char>(l[i]);
      size_t len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : 4;
      len = std::min(len, l.size() - i);
      uint32_t cp = 0;
      for (size_t k = 0; k < len; ++k) cp = (cp << 8) | static_cast<unsigned char>(l[i + k]);
      if (c != ' ') {  // spaces are the meta symbol, not a required character
        counts[cp]++;
        total++;
      }
      i += len;
    }
  }
  const size_t room = static_cast<size_t>(std::max(1, vocab_size - kMetaPieces - kMinMerges));
  if (counts.size() <= room || total == 0) return kDefault;
  std::vector<uint64_t> freq;
  for (const auto& [cp, n] : counts) freq.push_back(n);
  std::sort(freq.rbegin(), freq.rend());
  uint64_t kept = 0;
  for (size_t i = 0; i < room; ++i) kept += freq[i];
  // Strictly below the share of the `room` most frequent characters.
  // SentencePiece accepts [0.98, 1]; below that the vocabulary is simply too small.
  const double share = static_cast<double>(kept) / static_cast<double>(total) - 1e-6;
  return std::max(0.98, std::min(kDefault, share));
}

}  // namespace

absl::StatusOr<std::string> TrainTokenizer(const std::vector<std::string>& lines,
                                           const TokenizerTrainOptions& options) {
  if (lines.empty()) return absl::InvalidArgumentError("no text to train the tokenizer on");
  // unk + eot + "\n" + 256 bytes must fit, plus a few merges.
  if (options.vocab_size < 300) {
    return absl::InvalidArgumentError(
        absl::StrCat("vocab size ", options.vocab_size, " is too small (minimum 300)"));
  }
  size_t longest = 0;
  for (const std::string& l : lines) longest = std::max(longest, l.size());
  const std::unordered_map<std::string, std::string> spec = {
      {"model_type", "bpe"},
      {"vocab_size", std::to_string(options.vocab_size)},
      {"hard_vocab_limit", "false"},
      {"byte_fallback", "true"},
      {"character_coverage", std::to_string(CharacterCoverage(lines, options.vocab_size))},
      {"normalization_rule_name", "identity"},
      {"add_dummy_prefix", "false"},
      {"remove_extra_whitespaces", "false"},
      {"split_digits", "true"},
      {"max_sentence_length", std::to_string(std::max<size_t>(longest + 1, 4192))},
      {"input_sentence_size", "0"},
      {"shuffle_input_sentence", "false"},
      // The model file records trainer_spec (num_threads included): a fixed value keeps
      // the .model byte-identical whatever --threads is. SentencePiece's BPE trainer does
      // its merges in one thread anyway.
      {"num_threads", "1"},
      {"unk_id", "0"},
      {"bos_id", "-1"},
      {"eos_id", "-1"},
      {"pad_id", "-1"},
      {"control_symbols", kEotPiece},
      {"user_defined_symbols", "\n"},
      {"minloglevel", "1"},
      {"model_prefix", ""},
  };
  size_t next = 0;
  auto feed = [&](std::string* s) {
    if (next >= lines.size()) return false;
    *s = lines[next++];
    return true;
  };
  std::string model;
  std::string err = SpmTrain(spec, feed, &model);
  if (!err.empty()) {
    // The one failure a user causes: more distinct characters than the vocabulary can
    // hold even at the lowest coverage. SentencePiece's own words name its options.
    int asked = 0, needed = 0;
    const size_t at = err.find(kTooSmall);
    if (at != std::string::npos &&
        std::sscanf(err.c_str() + at + std::strlen(kTooSmall), " %d vs %d", &asked, &needed) == 2) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "a vocabulary of %d pieces is too small for this text: its characters (at 98%% "
          "coverage, the rest as bytes) and the special pieces need %d; use --vocab-size %d or "
          "more",
          options.vocab_size, needed, needed + kMinMerges));
    }
    return absl::InternalError("SentencePiece training failed: " + err);
  }
  return model;
}

}  // namespace rt::data
