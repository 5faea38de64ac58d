// The doctest main shared by every test executable (tests/<layer>/ -> test_<layer>),
// and the listener that turns skip.h's ReportSkip into the line ctest counts as a skip.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <iostream>

#include "skip.h"

namespace {

// Prints skip.h's marker when a test case that called ReportSkip ends without a failed
// check, so ctest reports it skipped; a case that failed stays failed.
class SkipListener : public doctest::IReporter {
 public:
  explicit SkipListener(const doctest::ContextOptions&) {}
  void report_query(const doctest::QueryData&) override {}
  void test_run_start() override {}
  void test_run_end(const doctest::TestRunStats&) override {}
  void test_case_start(const doctest::TestCaseData&) override {
    rt::testing::PendingSkipReason().clear();
  }
  void test_case_reenter(const doctest::TestCaseData&) override {}
  void test_case_end(const doctest::CurrentTestCaseStats& stats) override {
    std::string& reason = rt::testing::PendingSkipReason();
    if (reason.empty()) return;
    if (stats.testCaseSuccess) {
      std::cout << rt::testing::kSkipMarker << " " << reason << std::endl;
    } else {
      std::cout << "not reported skipped (" << reason << "): a check failed" << std::endl;
    }
    reason.clear();
  }
  void test_case_exception(const doctest::TestCaseException&) override {}
  void subcase_start(const doctest::SubcaseSignature&) override {}
  void subcase_end() override {}
  void log_assert(const doctest::AssertData&) override {}
  void log_message(const doctest::MessageData&) override {}
  void test_case_skipped(const doctest::TestCaseData&) override {}
};

}  // namespace

REGISTER_LISTENER("ringtrain-skip", 1, SkipListener);
