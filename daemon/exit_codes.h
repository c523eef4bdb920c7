// Exit codes of gossipd (documented in docs/daemon.md). `gossipd launch` returns the worst code
// of its nodes (the first non-zero one in this order of severity: 2, 1, 3, 4).
#pragma once

namespace gossip::daemon {

inline constexpr int kExitOk = 0;               // all iterations done
inline constexpr int kExitError = 1;            // runtime error: I/O, data, transport start, ...
inline constexpr int kExitUsage = 2;            // bad command line, config or topology file
inline constexpr int kExitNeighbourFailed = 3;  // fail-stop: a neighbour missed its deadline or
                                                // its link failed; checkpoint written first
inline constexpr int kExitStopped = 4;          // SIGTERM / SIGINT: checkpoint written, then exit

}  // namespace gossip::daemon
