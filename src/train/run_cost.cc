// The cost of a run and the GPU price file (see run_cost.h).
#include "train/run_cost.h"

#include <cmath>
#include <optional>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace rt::train {
namespace {

// A finite positive number, or nullopt.
std::optional<double> Positive(absl::string_view s) {
  double v = 0;
  if (!absl::SimpleAtod(s, &v) || !std::isfinite(v) || v <= 0) return std::nullopt;
  return v;
}

}  // namespace

absl::StatusOr<std::vector<GpuOffer>> ParseGpuPrices(absl::string_view text,
                                                     absl::string_view path) {
  std::vector<GpuOffer> offers;
  int line_no = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++line_no;
    auto bad = [&](const std::string& what) {
      return absl::InvalidArgumentError(absl::StrFormat("%s:%d: %s", path, line_no, what));
    };
    GpuOffer offer;
    const size_t hash = line.find('#');
    if (hash != absl::string_view::npos) {
      offer.note = std::string(absl::StripAsciiWhitespace(line.substr(hash + 1)));
      line = line.substr(0, hash);
    }
    std::vector<absl::string_view> fields =
        absl::StrSplit(absl::StripAsciiWhitespace(line), absl::ByAnyChar(" \t"), absl::SkipEmpty());
    if (fields.empty()) continue;
    if (fields.size() != 3) {
      return bad(absl::StrFormat(
          "expected NAME PRICE_PER_HOUR tflops=X (or tokens_per_s=X), got %d field(s)",
          fields.size()));
    }
    offer.name = std::string(fields[0]);
    std::optional<double> price = Positive(fields[1]);
    if (!price)
      return bad(absl::StrFormat("price per hour '%s' is not a positive number", fields[1]));
    offer.price_per_hour = *price;
    absl::string_view throughput = fields[2];
    if (absl::ConsumePrefix(&throughput, "tflops=")) {
      std::optional<double> v = Positive(throughput);
      if (!v) return bad(absl::StrFormat("tflops '%s' is not a positive number", throughput));
      offer.tflops = *v;
    } else if (absl::ConsumePrefix(&throughput, "tokens_per_s=")) {
      std::optional<double> v = Positive(throughput);
      if (!v) return bad(absl::StrFormat("tokens_per_s '%s' is not a positive number", throughput));
      offer.tokens_per_s = *v;
    } else {
      return bad(absl::StrFormat("'%s': the throughput is tflops=X or tokens_per_s=X", fields[2]));
    }
    offers.push_back(std::move(offer));
  }
  if (offers.empty()) return absl::InvalidArgumentError(absl::StrFormat("%s: no offers", path));
  return offers;
}

absl::StatusOr<double> ParseTokenCount(absl::string_view text) {
  absl::string_view digits = absl::StripAsciiWhitespace(text);
  double scale = 1;
  if (!digits.empty()) {
    switch (digits.back()) {
      case 'K':
      case 'k':
        scale = 1e3;
        break;
      case 'M':
      case 'm':
        scale = 1e6;
        break;
      case 'G':
      case 'g':
      case 'B':
      case 'b':
        scale = 1e9;
        break;
      case 'T':
      case 't':
        scale = 1e12;
        break;
      default:
        break;
    }
    if (scale != 1) digits.remove_suffix(1);
  }
  std::optional<double> v = Positive(digits);
  if (!v || *v * scale > 1e15) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "--train-tokens '%s' is not a positive token count (e.g. 2000000000, 2e9 or 2B)", text));
  }
  return *v * scale;
}

RunCost PriceRun(double tokens, double tokens_per_s, int units, double price_per_hour) {
  RunCost c;
  if (tokens_per_s <= 0) return c;
  c.seconds = tokens / tokens_per_s;
  c.tokens_per_day = tokens_per_s * 86400.0;
  c.cost = price_per_hour * units * c.seconds / 3600.0;
  return c;
}

double GpuTokensPerSecond(const GpuOffer& offer, double flops_per_token) {
  if (offer.tokens_per_s > 0) return offer.tokens_per_s;
  return flops_per_token > 0 ? offer.tflops * 1e12 / flops_per_token : 0;
}

}  // namespace rt::train
