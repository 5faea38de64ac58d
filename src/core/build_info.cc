// The version and commit CMake passes to this one file only (so that a new commit
// recompiles one file, not the layer).
#include "core/build_info.h"

#ifndef RINGTRAIN_PROJECT_VERSION
#define RINGTRAIN_PROJECT_VERSION "unknown"
#endif
#ifndef RINGTRAIN_COMMIT
#define RINGTRAIN_COMMIT "unknown"
#endif

namespace rt {

const char* BuildVersion() { return RINGTRAIN_PROJECT_VERSION; }
const char* BuildCommit() { return RINGTRAIN_COMMIT; }

}  // namespace rt
