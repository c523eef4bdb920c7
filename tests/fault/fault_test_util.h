// Helpers shared by the fault tests: scratch directories, running the real CLIs (gossip-topo,
// gossipd, gossip-faultproxy) with stdout and stderr captured separately, and a bounded wait for
// a child process.
#pragma once

#include <doctest/doctest.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

extern char** environ;

#include "tests/test_util.h"

namespace gossip::fault_testing {

namespace fs = std::filesystem;

// The environment variable set by ctest, else the directory CMake compiled in (ctest's
// ENVIRONMENT property as set by gossip_add_tests currently carries only the first variable).
inline std::string env_dir(const char* name, const char* fallback) {
  const char* v = std::getenv(name);
  return v != nullptr ? v : fallback;
}
inline std::string binary(const std::string& rel) {
  return env_dir("GOSSIP_BINARY_DIR", GOSSIP_FAULT_BINARY_DIR) + "/" + rel;
}
inline std::string source(const std::string& rel) {
  return env_dir("GOSSIP_SOURCE_DIR", GOSSIP_FAULT_SOURCE_DIR) + "/" + rel;
}

using gossip::testing::TempDir;

// A valid three-node topology file (a triangle on loopback ports 7000-7002), six lines: the base
// of the hostile-topology cases, which append a bad line 7 (or 8 after a name line).
inline const std::string kTriangleTopology =
    "node { id: 0 address: \"127.0.0.1:7000\" }\n"
    "node { id: 1 address: \"127.0.0.1:7001\" }\n"
    "node { id: 2 address: \"127.0.0.1:7002\" }\n"
    "edge { from: 0 to: 1 }\n"
    "edge { from: 1 to: 2 }\n"
    "edge { from: 2 to: 0 }\n";

// A small valid gossipd training config (logistic regression on 256 synthetic examples) of
// `iterations` iterations; `extra` (whole lines) goes after the iterations line.
inline std::string small_train_config(int iterations, const std::string& extra = "") {
  return "seed: 5\n"
         "model { kind: LOGISTIC }\n"
         "data { dataset: SYNTHETIC_LOGISTIC num_examples: 256 dim: 8 test_examples: 64 }\n"
         "optimizer { kind: SGD lr: 0.1 }\n"
         "batch_size: 16\n"
         "iterations: " +
         std::to_string(iterations) + "\n" + extra +
         "timeouts { connect_ms: 2000 deadline_ms: 1000 heartbeat_ms: 200 }\n";
}

inline std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

struct CliRun {
  int code = -1;  // exit status; 128 + signal when killed; -1 when it had to be killed
  std::string out;
  std::string err;
  long max_rss_kb = 0;  // peak resident memory of the child (wait4)
  double seconds = 0;   // wall time until it exited
};

// Extra knobs of run_cli: stdout to a given path (e.g. /dev/full) instead of a captured file,
// and a signal sent after a delay (SIGTERM during a connect wait).
struct CliExtras {
  std::string stdout_path;
  int signal = 0;
  int signal_after_ms = 0;
};

// Runs argv[0] with argv (no shell), stdout/stderr to files, killing it after `timeout_s`.
inline CliRun run_cli(const std::vector<std::string>& argv, int timeout_s = 30,
                      const std::string& cwd = "", const CliExtras& extras = {}) {
  TempDir io;
  const std::string out = extras.stdout_path.empty() ? io.file("stdout") : extras.stdout_path;
  const std::string err = io.file("stderr");
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(
      &fa, 1, out.c_str(), extras.stdout_path.empty() ? O_WRONLY | O_CREAT | O_TRUNC : O_WRONLY,
      0600);
  posix_spawn_file_actions_addopen(&fa, 2, err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  if (!cwd.empty()) posix_spawn_file_actions_addchdir_np(&fa, cwd.c_str());
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = -1;
  const int rc = ::posix_spawn(&pid, argv[0].c_str(), &fa, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  REQUIRE_MESSAGE(rc == 0, "cannot start ", argv[0]);
  CliRun r;
  int status = 0;
  struct rusage usage {};
  const auto begin = std::chrono::steady_clock::now();
  const auto end = begin + std::chrono::seconds(timeout_s);
  const auto signal_at = begin + std::chrono::milliseconds(extras.signal_after_ms);
  bool done = false, signalled = false;
  while (std::chrono::steady_clock::now() < end) {
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
  r.out = extras.stdout_path.empty() ? read_all(out) : std::string();
  r.err = read_all(err);
  if (!done)
    r.code = -1;
  else if (WIFEXITED(status))
    r.code = WEXITSTATUS(status);
  else if (WIFSIGNALED(status))
    r.code = 128 + WTERMSIG(status);
  return r;
}

inline bool contains(const std::string& hay, const std::string& needle) {
  return hay.find(needle) != std::string::npos;
}

// A CLI run in the background (no shell; stdout and stderr to files), for a test that acts while
// it runs. finish() waits a bounded time; the destructor kills it if it still runs.
class BackgroundCli {
 public:
  explicit BackgroundCli(const std::vector<std::string>& argv, const std::string& cwd = "") {
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 1, io_.file("stdout").c_str(),
                                     O_WRONLY | O_CREAT | O_TRUNC, 0600);
    posix_spawn_file_actions_addopen(&fa, 2, io_.file("stderr").c_str(),
                                     O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (!cwd.empty()) posix_spawn_file_actions_addchdir_np(&fa, cwd.c_str());
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    const int rc = ::posix_spawn(&pid_, argv[0].c_str(), &fa, nullptr, args.data(), environ);
    posix_spawn_file_actions_destroy(&fa);
    REQUIRE_MESSAGE(rc == 0, "cannot start ", argv[0]);
  }
  ~BackgroundCli() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
  }
  BackgroundCli(const BackgroundCli&) = delete;
  BackgroundCli& operator=(const BackgroundCli&) = delete;

  pid_t pid() const { return pid_; }
  std::string out() const { return read_all(io_.file("stdout")); }
  std::string err() const { return read_all(io_.file("stderr")); }
  // Waits until `file` (default: its stderr) contains `text`; false after `timeout_s`.
  bool wait_for(const std::string& text, int timeout_s, std::string file = "") const {
    if (file.empty()) file = io_.file("stderr");
    const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_s);
    while (!contains(read_all(file), text)) {
      if (std::chrono::steady_clock::now() > end) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return true;
  }
  // Its exit (CliRun's conventions; out and err read), killing it after `timeout_s`.
  CliRun finish(int timeout_s = 30) {
    CliRun r;
    int status = 0;
    const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_s);
    bool done = false;
    while (!done && std::chrono::steady_clock::now() < end) {
      done = ::waitpid(pid_, &status, WNOHANG) == pid_;
      if (!done) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    if (!done) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, &status, 0);
    }
    pid_ = -1;
    r.code = !done ? -1 : WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    r.out = out();
    r.err = err();
    return r;
  }

 private:
  TempDir io_;
  pid_t pid_ = -1;
};

}  // namespace gossip::fault_testing
