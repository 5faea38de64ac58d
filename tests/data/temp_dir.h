// Test helper for the data layer: the shared TempDir and file helpers (tests/temp_dir.h).
#pragma once

#include "../temp_dir.h"

namespace rt::data::testing {

using ::rt::testing::ReadFile;
using ::rt::testing::TempDir;
using ::rt::testing::WriteFile;

}  // namespace rt::data::testing
