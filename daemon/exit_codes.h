// Exit codes of gossipd, the single source in code (the table is docs/fault.md "Exit codes"; the
// codes gossip-topo and gossip-sim share with it, 1, 2 and 5, are defined in common/cli.h and
// checked equal here). `gossipd launch` returns the worst code of its nodes (the first non-zero
// one in this order of severity: 2, 6, 5, 1, 3, 4).
#pragma once

#include "common/cli.h"

namespace gossip::daemon {

inline constexpr int kExitOk = 0;               // all iterations done
inline constexpr int kExitError = 1;            // runtime error: I/O, data, transport start, out
                                                // of memory, a failed write of an output
inline constexpr int kExitUsage = 2;            // bad command line, config or topology file; a
                                                // model too large for the memory cap; a fresh run
                                                // in a checkpoint directory holding another run;
                                                // a directory held by another process; an output
                                                // that cannot be written (checked at start)
inline constexpr int kExitNeighbourFailed = 3;  // fail-stop: a neighbour missed its deadline or
                                                // its link failed; checkpoint written first
inline constexpr int kExitStopped = 4;          // SIGTERM / SIGINT: checkpoint written, then exit
inline constexpr int kExitDiverged = 5;         // loss or parameters NaN/Inf: stopped, nothing
                                                // written (the last good checkpoint stays newest)
inline constexpr int kExitCannotResume = 6;     // --resume / --resume-at found no usable
                                                // checkpoint (damaged, other config or topology)
inline constexpr int kExitTrainerGone = 7;      // attach mode: the external trainer died, hung
                                                // past the deadline or stopped; the node left the
                                                // group with a checkpoint of its mixed state

static_assert(kExitError == gossip::kExitRuntimeError);
static_assert(kExitUsage == gossip::kExitUsageError);
static_assert(kExitDiverged == gossip::kExitDiverged);

}  // namespace gossip::daemon
