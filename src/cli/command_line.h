// The command line of one subcommand, flag files included.
//
// Abseil parses the flags, but before it does, everything is checked here with the
// place it came from, so that a flag file behaves exactly like the command line:
//   - names may be written --seq-len or --seq_len (Abseil's names cannot hold dashes);
//   - --flag=value and --flag value (the next argument, or in a file the rest of the
//     line); bool flags as --flag, --noflag or --flag=true|false;
//   - --flagfile=FILE or --flagfile FILE (several: repeat it, or FILE1,FILE2) is
//     replaced by FILE's flags, one per line, where it stands: later flags win;
//   - a flag the subcommand does not read is an error, whether Abseil knows it
//     ("unknown flag --stepz") or another subcommand reads it ("unknown flag
//     --prompt: ringtrain train does not use it");
//   - a value Abseil refuses is reported before anything runs;
// and every error names its origin: FILE:LINE for a flag file line, nothing for the
// command line itself.
//
// Flag file syntax: one flag per line, leading and trailing white space ignored;
// blank lines and lines starting with '#' are skipped; anything else must start with
// '-'. A value may be wrapped in one pair of matching quotes ("..." or '...'), which
// are removed (as a shell would), so a line copied from a command line works. There is
// no other quoting or escaping: the value is the rest of the line. Nested --flagfile
// lines are expanded (paths as written, relative to the working directory, like on the
// command line); a file that includes itself is an error.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "cli/subcommand.h"

namespace rt::cli {

// One argument and where it came from ("" = the command line, else "FILE:LINE").
struct OriginArg {
  std::string text;
  std::string origin;
};

// The flags of one flag file, each as one "--name=value" or "--name" argument whose
// origin is "PATH:LINE". `include_origin` (where the --flagfile was written) prefixes
// the error if the file cannot be read (missing, not a regular file, over 1 MiB);
// a line that is not a flag is an error naming PATH:LINE.
absl::StatusOr<std::vector<OriginArg>> ReadFlagFile(const std::string& path,
                                                    const std::string& include_origin);

// ReadFlagFile's parsing of the text of the flag file `path` (which is not read).
absl::StatusOr<std::vector<OriginArg>> ParseFlagFileText(absl::string_view text,
                                                         const std::string& path);

struct ParsedArgs {
  bool help = false;                    // --help, -h or --helpfull was given
  std::vector<std::string> positional;  // the non-flag arguments, in order
};

// Parses `args` (what follows "ringtrain <sub>") for subcommand `sub`: expands flag
// files, checks every flag name against sub.flags and every value against its flag,
// then sets the flags through Abseil. InvalidArgument errors are ready to print after
// "ringtrain <sub>: ", e.g. "train.flags:3: unknown flag --prompt: ringtrain train does
// not use it (see ringtrain train --help)". If --help is found on the command line,
// returns {help = true} at once without setting anything.
absl::StatusOr<ParsedArgs> ParseSubcommandArgs(const Subcommand& sub,
                                               const std::vector<std::string>& args);

}  // namespace rt::cli
