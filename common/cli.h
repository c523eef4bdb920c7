// Command-line parsing shared by the programs (gossip-topo, gossip-sim, gossipd): CLI11 reports a
// usage error with its own exit codes (104, 106, 109, ...); the programs document 2 for every
// usage error (README "Command line"), so they parse through here. Every program also gets
// --version (the version and the CPU kernels' instruction-set level, common/isa.h) and the check
// of GOSSIP_CPU, before it does anything else.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdio>
#include <optional>
#include <string>

#include "common/isa.h"

namespace gossip {

inline constexpr int kExitUsageError = 2;  // bad command line (or, for gossipd, config or topology)

inline constexpr const char* kVersion = "0.1.0";

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

}  // namespace gossip
