// Running the real programs from tests: a command (no shell) with its stdout and stderr captured,
// its exit code, peak memory and wall time, killed at a time limit; a shell command; a child left
// running and waited for later; a forked child with a pipe back. Header-only; needs doctest (a
// program that cannot be started fails the test).
#pragma once

#include <doctest/doctest.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "tests/support/files.h"

extern char** environ;

namespace gossip::testing {

struct ProcessResult {
  int code = -1;    // exit status; 128 + signal when a signal ended it; -1 when it had to be killed
  std::string out;  // standard output (and standard error, when merged)
  std::string err;  // standard error
  long max_rss_kb = 0;  // peak resident memory of the child (wait4)
  double seconds = 0;   // wall time until it exited
};

// More of run_process: stdout to a given path (e.g. /dev/full) instead of being captured, a signal
// sent after a delay (SIGTERM during a connect wait), stderr merged into `out`.
struct ProcessExtras {
  std::string stdout_path;
  int signal = 0;
  int signal_after_ms = 0;
  bool merge_stderr = false;
};

// The exit code wait4's status means (ProcessResult::code).
inline int exit_code_of(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return -1;
}

// Runs argv[0] (a path, or a name looked up in PATH) with argv, no shell, stdin /dev/null, stdout
// and stderr to files, in `cwd` when given, killing it after `timeout_s` (0: no limit).
inline ProcessResult run_process(const std::vector<std::string>& argv, int timeout_s = 30,
                                 const std::string& cwd = "", const ProcessExtras& extras = {}) {
  TempDir io;
  const std::string out = extras.stdout_path.empty() ? io.file("stdout") : extras.stdout_path;
  const std::string err = io.file("stderr");
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(
      &fa, 1, out.c_str(), extras.stdout_path.empty() ? O_WRONLY | O_CREAT | O_TRUNC : O_WRONLY,
      0600);
  if (extras.merge_stderr) {
    posix_spawn_file_actions_adddup2(&fa, 1, 2);
  } else {
    posix_spawn_file_actions_addopen(&fa, 2, err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  }
  if (!cwd.empty()) posix_spawn_file_actions_addchdir_np(&fa, cwd.c_str());
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = -1;
  // A bare name is looked up in PATH ("openssl"), a path is run as it is.
  const auto spawn = argv[0].find('/') == std::string::npos ? ::posix_spawnp : ::posix_spawn;
  const int rc = spawn(&pid, argv[0].c_str(), &fa, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  REQUIRE_MESSAGE(rc == 0, "cannot start ", argv[0]);
  ProcessResult r;
  int status = 0;
  struct rusage usage {};
  const auto begin = std::chrono::steady_clock::now();
  const auto signal_at = begin + std::chrono::milliseconds(extras.signal_after_ms);
  bool done = false, signalled = false;
  while (timeout_s == 0 ||
         std::chrono::steady_clock::now() < begin + std::chrono::seconds(timeout_s)) {
    if (::wait4(pid, &status, WNOHANG, &usage) == pid) {
      done = true;
      break;
    }
    if (extras.signal != 0 && !signalled && std::chrono::steady_clock::now() >= signal_at) {
      ::kill(pid, extras.signal);
      signalled = true;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count();
  if (!done) {
    ::kill(pid, SIGKILL);
    ::wait4(pid, &status, 0, &usage);
  }
  r.max_rss_kb = usage.ru_maxrss;
  r.out = extras.stdout_path.empty() ? read_file(out) : std::string();
  r.err = extras.merge_stderr ? std::string() : read_file(err);
  r.code = done ? exit_code_of(status) : -1;
  return r;
}

// `/bin/sh -c command`, no time limit (a command that may hang carries its own `timeout`): its
// exit code, and its standard output and error together in `out`.
inline ProcessResult run_shell_capture(const std::string& command) {
  ProcessExtras merged;
  merged.merge_stderr = true;
  return run_process({"/bin/sh", "-c", command}, 0, "", merged);
}
// The same, for the exit code alone.
inline int run_shell(const std::string& command) { return run_shell_capture(command).code; }

// `/bin/sh -c command` started and left running (stdio inherited); wait_exit() reaps it.
inline pid_t spawn_shell(const std::string& command) {
  pid_t pid = -1;
  const char* argv[] = {"/bin/sh", "-c", command.c_str(), nullptr};
  REQUIRE(posix_spawn(&pid, "/bin/sh", nullptr, nullptr, const_cast<char**>(argv), environ) == 0);
  return pid;
}

// Waits for `pid` to end; its exit code as ProcessResult::code says.
inline int wait_exit(pid_t pid) {
  int status = 0;
  ::waitpid(pid, &status, 0);
  return exit_code_of(status);
}

// A forked child of this test process with a pipe to it: the child runs `body(write_fd)` and exits
// 0 (unless `body` exits itself); the parent gets the child's pid and the pipe's read end.
struct ForkedChild {
  pid_t pid = -1;
  int read_fd = -1;
};
template <class Body>
ForkedChild fork_with_pipe(const Body& body) {
  int fds[2];
  REQUIRE(::pipe(fds) == 0);
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    ::close(fds[0]);
    body(fds[1]);
    ::_exit(0);
  }
  ::close(fds[1]);
  return {pid, fds[0]};
}

// Everything `child` writes to its pipe until it closes it; then closes the read end and reaps the
// child.
inline std::string read_all_and_reap(const ForkedChild& child) {
  std::string out;
  char buf[1024];
  for (ssize_t n; (n = ::read(child.read_fd, buf, sizeof buf)) > 0;) {
    out.append(buf, static_cast<std::size_t>(n));
  }
  ::close(child.read_fd);
  ::waitpid(child.pid, nullptr, 0);
  return out;
}

}  // namespace gossip::testing
