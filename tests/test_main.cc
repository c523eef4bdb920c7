// Shared doctest main for the test executables.
//
// CTest runs each TEST_CASE on its own with --test-case=<name>. If that name does not match any
// test (a renamed test, or a name CMake's list handling split at a ';'), doctest would run nothing
// and exit 0 — a test that cannot fail. The listener below makes such a run fail instead.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstdio>

namespace {

int g_cases_selected = -1;

struct SelectedCasesListener : doctest::IReporter {
  explicit SelectedCasesListener(const doctest::ContextOptions&) {}
  void report_query(const doctest::QueryData&) override {}
  void test_run_start() override {}
  void test_run_end(const doctest::TestRunStats& stats) override {
    g_cases_selected = static_cast<int>(stats.numTestCasesPassingFilters);
  }
  void test_case_start(const doctest::TestCaseData&) override {}
  void test_case_reenter(const doctest::TestCaseData&) override {}
  void test_case_end(const doctest::CurrentTestCaseStats&) override {}
  void test_case_exception(const doctest::TestCaseException&) override {}
  void subcase_start(const doctest::SubcaseSignature&) override {}
  void subcase_end() override {}
  void log_assert(const doctest::AssertData&) override {}
  void log_message(const doctest::MessageData&) override {}
  void test_case_skipped(const doctest::TestCaseData&) override {}
};

REGISTER_LISTENER("selected_cases", 1, SelectedCasesListener);

}  // namespace

int main(int argc, char** argv) {
  doctest::Context context(argc, argv);
  const int result = context.run();
  if (context.shouldExit()) return result;  // --list-test-cases, --help, ...
  if (result == 0 && g_cases_selected == 0) {
    std::fprintf(stderr, "test_main: no test case matched the filters: nothing was tested\n");
    return 1;
  }
  return result;
}
