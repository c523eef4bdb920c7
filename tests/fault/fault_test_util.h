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

}  // namespace gossip::fault_testing
