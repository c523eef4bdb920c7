// Helpers shared by the fault tests: where the built programs and the sources are, and the inputs
// the cases start from. Scratch directories and running the real CLIs (gossip-topo, gossipd,
// gossip-faultproxy) with stdout and stderr captured separately are tests/support's.
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

#include "tests/support/files.h"
#include "tests/support/process.h"

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

using gossip::testing::ProcessExtras;
using gossip::testing::ProcessResult;
using gossip::testing::read_file;
using gossip::testing::run_process;
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
  std::string out() const { return read_file(io_.file("stdout")); }
  std::string err() const { return read_file(io_.file("stderr")); }
  // Waits until `file` (default: its stderr) contains `text`; false after `timeout_s`.
  bool wait_for(const std::string& text, int timeout_s, std::string file = "") const {
    if (file.empty()) file = io_.file("stderr");
    const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_s);
    while (!contains(read_file(file), text)) {
      if (std::chrono::steady_clock::now() > end) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return true;
  }
  // Its exit (ProcessResult's conventions; out and err read), killing it after `timeout_s`.
  ProcessResult finish(int timeout_s = 30) {
    ProcessResult r;
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
