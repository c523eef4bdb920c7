// Command-line parsing shared by the programs (gossip-topo, gossip-sim, gossipd): CLI11 reports a
// usage error with its own exit codes (104, 106, 109, ...); the programs document 2 for every
// usage error (README "Command line"), so they parse through here. Every program also gets
// --version (the version and the CPU kernels' instruction-set level, common/isa.h) and the check
// of GOSSIP_CPU, before it does anything else. Also the two things every program's main() does on
// the way out: no exception escapes it (guard_main), and standard output is flushed and closed
// with its errors checked (finish_stdout), so `> /dev/full` or a full disk is an error, not a
// silent exit 0.
#pragma once

#include <CLI/CLI.hpp>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <exception>
#include <iostream>
#include <new>
#include <optional>
#include <string>

#include "common/isa.h"

namespace gossip {

inline constexpr int kExitRuntimeError = 1;  // I/O, data, out of memory, ...
inline constexpr int kExitUsageError = 2;  // bad command line (or, for gossipd, config or topology)
inline constexpr int kExitDiverged = 5;    // training diverged (common/divergence.h)

inline constexpr const char* kVersion = "0.1.0";

// For an unsigned option (a seed): CLI11 would read "-1" as 2^64 - 1. Refuses a leading '-'
// with a message that says what is expected.
inline CLI::Validator non_negative_integer() {
  return CLI::Validator(
      [](std::string& value) {
        return !value.empty() && value.front() == '-' ? "expected a whole number >= 0, got " + value
                                                      : std::string();
      },
      "INT>=0");
}

// "<program> 0.1.0\ncpu kernels: avx2 (detected)".
inline std::string version_text(const std::string& program) {
  return program + " " + kVersion + "\n" + isa_description();
}

// Parses argv into `app`. nullopt: go on. Otherwise the program's exit code: 0 after --help or
// --version (printed to stdout), kExitUsageError after a usage error (CLI11 prints the message to
// stderr) or a GOSSIP_CPU this CPU cannot honour.
inline std::optional<int> parse_command_line(CLI::App& app, int argc, char** argv) {
  if (const Status s = init_isa(); !s.is_ok()) {
    std::fprintf(stderr, "error: %s\n", s.message().c_str());
    return kExitUsageError;
  }
  std::string program = argc > 0 ? argv[0] : "";
  program = program.substr(program.find_last_of('/') + 1);
  app.set_version_flag(
      "--version", [program] { return version_text(program); },
      "print the version and the CPU kernels' instruction-set level (GOSSIP_CPU forces one: "
      "avx512, avx2 or portable), then exit");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : kExitUsageError;
  }
  return std::nullopt;
}

// Flushes std::cout and stdout and closes stdout. A write that failed at any point (std::cout's
// state, stdout's error flag) or a failed flush or close is reported on stderr as "PROGRAM:
// writing standard output: REASON" and turns `rc` 0 into kExitRuntimeError. Call it last.
inline int finish_stdout(const char* program, int rc) {
  errno = 0;
  std::cout.flush();
  bool failed = std::cout.fail();
  int err = errno;
  if (std::fflush(stdout) != 0 || std::ferror(stdout)) {
    failed = true;
    err = err ? err : errno;
  }
  if (std::fclose(stdout) != 0 && !failed) {
    failed = true;
    err = errno;
  }
  if (!failed) return rc;
  std::fprintf(stderr, "%s: writing standard output: %s\n", program,
               err ? std::strerror(err) : "write failed");
  return rc == 0 ? kExitRuntimeError : rc;
}

// Runs `body` (returning the exit code); std::bad_alloc and any other exception become a message
// on stderr and kExitRuntimeError instead of std::terminate (exit 134).
template <class Body>
int guard_main(const char* program, Body&& body) {
  try {
    return body();
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr,
                 "%s: out of memory (an allocation failed; the input asks for more memory "
                 "than this machine can give)\n",
                 program);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: internal error: %s\n", program, e.what());
  } catch (...) {
    std::fprintf(stderr, "%s: internal error: unknown exception\n", program);
  }
  return kExitRuntimeError;
}

}  // namespace gossip
