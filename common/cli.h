// Command-line parsing shared by the programs (gossip-topo, gossip-sim, gossipd): CLI11 reports a
// usage error with its own exit codes (104, 106, 109, ...); the programs document 2 for every
// usage error (README "Command line"), so they parse through here.
#pragma once

#include <CLI/CLI.hpp>

#include <optional>

namespace gossip {

inline constexpr int kExitUsageError = 2;  // bad command line (or, for gossipd, config or topology)

// Parses argv into `app`. nullopt: go on. Otherwise the program's exit code: 0 after --help
// (CLI11 prints it), kExitUsageError after a usage error (CLI11 prints the message to stderr).
inline std::optional<int> parse_command_line(CLI::App& app, int argc, char** argv) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : kExitUsageError;
  }
  return std::nullopt;
}

}  // namespace gossip
