// What this binary is: its version and the commit it was built from, for
// `ringtrain --version`, release names and logs.
#pragma once

namespace rt {

// The project version, e.g. "0.1".
const char* BuildVersion();
// `git describe --always --dirty` of the source tree when CMake configured the build,
// e.g. "050c2f8abcde" or "050c2f8abcde-dirty"; "unknown" outside a git checkout.
const char* BuildCommit();

}  // namespace rt
