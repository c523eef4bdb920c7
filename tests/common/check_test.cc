// GOSSIP_CHECK: a failed check aborts with file:line and the operands' values.
#include "common/check.h"

#include <doctest/doctest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <string>

namespace gossip {
namespace {

// Runs `f` in a child process and returns what it wrote to stderr and whether it aborted.
template <typename F>
std::pair<std::string, bool> run_in_child(F f) {
  int pipefd[2];
  REQUIRE(::pipe(pipefd) == 0);
  pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    ::dup2(pipefd[1], 2);
    ::close(pipefd[0]);
    f();
    ::_exit(0);
  }
  ::close(pipefd[1]);
  std::string out;
  char buf[512];
  ssize_t n;
  while ((n = ::read(pipefd[0], buf, sizeof buf)) > 0) out.append(buf, static_cast<size_t>(n));
  ::close(pipefd[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  return {out, WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT};
}

TEST_CASE("passing checks do nothing, failing ones abort with the values") {
  auto [ok_out, ok_aborted] = run_in_child([] {
    GOSSIP_CHECK(1 + 1 == 2) << "never printed";
    GOSSIP_CHECK_EQ(3, 3);
  });
  CHECK_FALSE(ok_aborted);
  CHECK(ok_out.empty());

  auto [out, aborted] = run_in_child([] {
    int rows = 3, cols = 4;
    GOSSIP_CHECK_EQ(rows, cols) << "matrix must be square";
  });
  CHECK(aborted);
  CHECK(out.find("check_test.cc") != std::string::npos);
  CHECK(out.find("rows == cols") != std::string::npos);
  CHECK(out.find("(3 vs 4)") != std::string::npos);
  CHECK(out.find("matrix must be square") != std::string::npos);
}

}  // namespace
}  // namespace gossip
