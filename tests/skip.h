// How a test case tells ctest it was skipped, and why: ReportSkip("needs root"), then
// return from the test case. ctest runs each doctest case as its own process and marks
// it "Skipped" (not "Passed") when its output holds the marker line below
// (SKIP_REGULAR_EXPRESSION, set for every discovered case in CMakeLists.txt); tools/test
// lists the skipped cases with their reasons at the end.
//
// The marker is printed when the test case ends (test_main.cc's listener), and only if
// no check of the case failed: ctest would count a case whose output holds the marker as
// skipped even if it failed, so a skip can never hide a failure. Skip before checking
// anything: a case that skips counts as skipped as a whole, subcases included.
#pragma once

#include <iostream>
#include <string>

namespace rt::testing {

// The line ctest's SKIP_REGULAR_EXPRESSION matches (keep CMakeLists.txt and tools/test
// in step with it).
inline constexpr char kSkipMarker[] = "RINGTRAIN_TEST_SKIPPED:";

// The reason given to ReportSkip in the running test case ("" if none).
inline std::string& PendingSkipReason() {
  static std::string reason;
  return reason;
}

// Marks the running test case skipped for `reason` (say what is missing and what the
// test needs, e.g. "not root: needs root and ip netns"). The caller returns right after.
inline void ReportSkip(const std::string& reason) {
  std::cout << "skipping: " << reason << std::endl;
  PendingSkipReason() = reason;
}

}  // namespace rt::testing
