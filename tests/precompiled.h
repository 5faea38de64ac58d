// The headers most test files include, precompiled once per test executable
// (target_precompile_headers in CMakeLists.txt) so that each of its sources skips parsing
// them: doctest, the standard library and the Abseil types every layer's interface uses.
// Each is included by at least half of the test sources (most by 85-99%). Test files still
// include what they use: this list only makes that cheaper, a build without precompiled
// headers (-DCMAKE_DISABLE_PRECOMPILE_HEADERS=ON) must compile too.
#pragma once

#include <doctest/doctest.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <thread>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
