// Parsing of a subcommand's command line and flag files (see command_line.h).
#include "cli/command_line.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>

#include "absl/container/flat_hash_set.h"
#include "absl/flags/commandlineflag.h"
#include "absl/flags/parse.h"
#include "absl/flags/reflection.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "core/status_macros.h"

namespace rt::cli {
namespace {

// A flag file is a few hundred bytes; anything this large is not one (a wrong path).
constexpr size_t kMaxFlagFileBytes = 1 << 20;
// Nested --flagfile lines deeper than this are refused (a cycle through symlinks, say).
constexpr int kMaxFlagFileDepth = 16;

std::string At(const std::string& origin, const std::string& message) {
  return origin.empty() ? message : absl::StrCat(origin, ": ", message);
}

absl::Status ErrorAt(const std::string& origin, const std::string& message) {
  return absl::InvalidArgumentError(At(origin, message));
}

std::string Dashed(std::string name) { return absl::StrReplaceAll(name, {{"_", "-"}}); }

// "--seq-len=4" -> {"seq_len", "4", has_value}; one or two leading dashes, as Abseil.
struct FlagToken {
  std::string name;  // underscored
  std::string value;
  bool has_value = false;
};
bool IsFlagToken(const std::string& text) {
  return text.size() >= 2 && text[0] == '-' && text != "--";
}
FlagToken SplitFlagToken(const std::string& text) {
  std::string body = text.substr(text.compare(0, 2, "--") == 0 ? 2 : 1);
  FlagToken t;
  const size_t eq = body.find('=');
  t.name = absl::StrReplaceAll(body.substr(0, eq), {{"-", "_"}});
  if (eq != std::string::npos) {
    t.value = body.substr(eq + 1);
    t.has_value = true;
  }
  return t;
}

std::string StripMatchingQuotes(std::string value) {
  if (value.size() >= 2 && (value.front() == '"' || value.front() == '\'') &&
      value.back() == value.front()) {
    return value.substr(1, value.size() - 2);
  }
  return value;
}

absl::StatusOr<std::string> ReadSmallFile(const std::string& path) {
  std::error_code ec;
  const auto status = std::filesystem::status(path, ec);
  if (ec) return absl::NotFoundError(ec.message());
  if (!std::filesystem::is_regular_file(status)) return absl::NotFoundError("not a regular file");
  std::unique_ptr<FILE, int (*)(FILE*)> f(std::fopen(path.c_str(), "rb"), &std::fclose);
  if (!f) return absl::NotFoundError(std::strerror(errno));
  std::string text;
  char buf[4096];
  size_t n = 0;
  while ((n = std::fread(buf, 1, sizeof buf, f.get())) > 0) {
    text.append(buf, n);
    if (text.size() > kMaxFlagFileBytes) {
      return absl::InvalidArgumentError(
          absl::StrCat("larger than ", kMaxFlagFileBytes >> 20, " MiB: not a flag file"));
    }
  }
  if (std::ferror(f.get())) return absl::DataLossError(std::strerror(errno));
  return text;
}

// One flag assignment after name resolution: flag `name` (underscored) = `value`.
struct Assignment {
  std::string name, value, origin;
};

class Parser {
 public:
  explicit Parser(const Subcommand& sub)
      : sub_(sub), allowed_(sub.flags.begin(), sub.flags.end()) {}

  // Walks `args` (one list: the command line or one file's lines).
  absl::Status Walk(const std::vector<OriginArg>& args, int depth) {
    for (size_t i = 0; i < args.size(); ++i) {
      const OriginArg& arg = args[i];
      if (end_of_flags_ || !IsFlagToken(arg.text)) {
        if (arg.text == "--" && !end_of_flags_) {
          end_of_flags_ = true;
          continue;
        }
        positional_.push_back(arg.text);
        continue;
      }
      FlagToken t = SplitFlagToken(arg.text);
      // --flag value: on the command line the next argument; a file line is one argument.
      auto take_next_value = [&]() -> absl::Status {
        if (i + 1 < args.size() && args[i + 1].origin == arg.origin && arg.origin.empty()) {
          t.value = args[++i].text;
          t.has_value = true;
          return absl::OkStatus();
        }
        return ErrorAt(arg.origin, absl::StrCat("--", Dashed(t.name), " needs a value"));
      };
      if (t.name == "flagfile") {
        if (!t.has_value) RETURN_IF_ERROR(take_next_value());
        RETURN_IF_ERROR(Include(t.value, arg.origin, depth));
        continue;
      }
      const absl::CommandLineFlag* flag = nullptr;
      if (allowed_.contains(t.name)) flag = absl::FindCommandLineFlag(t.name);
      if (flag == nullptr && !t.has_value && t.name.compare(0, 2, "no") == 0 &&
          allowed_.contains(t.name.substr(2))) {
        const absl::CommandLineFlag* negated = absl::FindCommandLineFlag(t.name.substr(2));
        if (negated != nullptr && negated->IsOfType<bool>()) {
          flag = negated;
          t.name = t.name.substr(2);
          t.value = "false";
          t.has_value = true;
        }
      }
      if (flag == nullptr) return UnknownFlag(t.name, arg.origin);
      if (!t.has_value) {
        if (flag->IsOfType<bool>()) {
          t.value = "true";
        } else {
          RETURN_IF_ERROR(take_next_value());
        }
      }
      assignments_.push_back({t.name, t.value, arg.origin});
    }
    return absl::OkStatus();
  }

  // Checks every value against its flag (which sets it), then hands the normalized
  // command line to Abseil.
  absl::StatusOr<ParsedArgs> Finish() {
    std::vector<std::string> argv_s = {absl::StrCat("ringtrain ", sub_.name)};
    for (const Assignment& a : assignments_) {
      absl::CommandLineFlag* flag = absl::FindCommandLineFlag(a.name);
      std::string error;
      if (!flag->ParseFrom(a.value, &error)) {
        return ErrorAt(a.origin, absl::StrCat("--", Dashed(a.name), "=", a.value, ": ", error));
      }
      argv_s.push_back(absl::StrCat("--", a.name, "=", a.value));
    }
    argv_s.push_back("--");
    for (const std::string& p : positional_) argv_s.push_back(p);
    std::vector<char*> argv;
    for (std::string& a : argv_s) argv.push_back(a.data());
    absl::ParseCommandLine(static_cast<int>(argv.size()), argv.data());
    ParsedArgs parsed;
    parsed.positional = positional_;
    return parsed;
  }

 private:
  absl::Status UnknownFlag(const std::string& name, const std::string& origin) const {
    const std::string see = absl::StrCat(" (see ringtrain ", sub_.name, " --help)");
    const absl::CommandLineFlag* other = absl::FindCommandLineFlag(name);
    if (other != nullptr && !other->IsRetired()) {
      return ErrorAt(origin, absl::StrCat("unknown flag --", Dashed(name), ": ringtrain ",
                                          sub_.name, " does not use it", see));
    }
    return ErrorAt(origin, absl::StrCat("unknown flag --", Dashed(name), see));
  }

  // --flagfile=A,B written at `origin`.
  absl::Status Include(const std::string& list, const std::string& origin, int depth) {
    if (list.empty()) return ErrorAt(origin, "--flagfile needs a file name");
    for (const std::string& path :
         std::vector<std::string>(absl::StrSplit(list, ',', absl::SkipEmpty()))) {
      if (depth >= kMaxFlagFileDepth) {
        return ErrorAt(origin, absl::StrCat("--flagfile ", path, ": more than ", kMaxFlagFileDepth,
                                            " nested flag files"));
      }
      std::error_code ec;
      const std::string key = std::filesystem::weakly_canonical(path, ec).string();
      for (const std::string& open : open_files_) {
        if (open == key) {
          return ErrorAt(origin, absl::StrCat("--flagfile ", path, " includes itself"));
        }
      }
      ASSIGN_OR_RETURN(std::vector<OriginArg> lines, ReadFlagFile(path, origin));
      open_files_.push_back(key);
      RETURN_IF_ERROR(Walk(lines, depth + 1));
      open_files_.pop_back();
    }
    return absl::OkStatus();
  }

  const Subcommand& sub_;
  absl::flat_hash_set<std::string> allowed_;
  std::vector<Assignment> assignments_;
  std::vector<std::string> positional_;
  std::vector<std::string> open_files_;  // canonical paths of the files being read
  bool end_of_flags_ = false;
};

}  // namespace

absl::StatusOr<std::vector<OriginArg>> ReadFlagFile(const std::string& path,
                                                    const std::string& include_origin) {
  absl::StatusOr<std::string> text = ReadSmallFile(path);
  if (!text.ok()) {
    return ErrorAt(include_origin, absl::StrCat("--flagfile ", path,
                                                ": cannot read it: ", text.status().message()));
  }
  return ParseFlagFileText(*text, path);
}

absl::StatusOr<std::vector<OriginArg>> ParseFlagFileText(absl::string_view text,
                                                         const std::string& path) {
  std::vector<OriginArg> out;
  int line_no = 0;
  for (absl::string_view raw : absl::StrSplit(text, '\n')) {
    ++line_no;
    const std::string line(absl::StripAsciiWhitespace(raw));  // also a CRLF file's '\r'
    if (line.empty() || line[0] == '#') continue;
    const std::string origin = absl::StrCat(path, ":", line_no);
    if (!IsFlagToken(line) || line[1] == '=' || absl::ascii_isspace(line[1])) {
      return ErrorAt(origin, absl::StrCat("'", line,
                                          "' is not a flag (a flag file holds one --flag, "
                                          "--flag=value or --flag value per line)"));
    }
    // The name ends at the first '=' or white space; the value is the rest of the line.
    const size_t end = line.find_first_of("= \t");
    if (end == std::string::npos) {
      out.push_back({line, origin});
      continue;
    }
    std::string value(absl::StripAsciiWhitespace(line.substr(end + 1)));
    if (line[end] != '=' && value.empty()) {
      out.push_back({line.substr(0, end), origin});
      continue;
    }
    out.push_back({absl::StrCat(line.substr(0, end), "=", StripMatchingQuotes(value)), origin});
  }
  return out;
}

absl::StatusOr<ParsedArgs> ParseSubcommandArgs(const Subcommand& sub,
                                               const std::vector<std::string>& args) {
  for (const std::string& arg : args) {
    if (arg == "--") break;
    if (arg == "--help" || arg == "-h" || arg == "--helpfull" || arg == "-help") {
      ParsedArgs help;
      help.help = true;
      return help;
    }
  }
  for (const auto& [name, value] : sub.flag_defaults) {
    absl::CommandLineFlag* flag = absl::FindCommandLineFlag(name);
    std::string error;
    if (flag == nullptr || !flag->ParseFrom(value, &error)) {
      return absl::InternalError(absl::StrCat("ringtrain ", sub.name, "'s default --", Dashed(name),
                                              "=", value, " is refused: ", error));
    }
  }
  std::vector<OriginArg> command_line;
  for (const std::string& arg : args) command_line.push_back({arg, ""});
  Parser parser(sub);
  if (absl::Status s = parser.Walk(command_line, 0); !s.ok()) return s;
  return parser.Finish();
}

}  // namespace rt::cli
