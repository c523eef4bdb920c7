// Slurm's compressed lists, as srun hands them to every task (docs/daemon.md, "Starting from a
// scheduler"): the host list of SLURM_JOB_NODELIST (`node[01-03,07],gpu-a[1-2]`) and the
// tasks-per-node layout of SLURM_TASKS_PER_NODE (`2(x3),1`). Pure functions of their text.
//
// Errors are InvalidArgument naming the variable, its value and the 1-based position of the first
// character at fault, e.g.
//   SLURM_JOB_NODELIST="node[01-x3]": position 9: expected a number
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace gossip::daemon {

// The most hosts a host list may expand to (a typo such as node[1-999999999] is refused before
// anything is allocated).
inline constexpr std::size_t kMaxHostlistHosts = 1'000'000;

// Expands a Slurm host list into host names, in order, as `scontrol show hostnames` does (and a
// little more: Slurm 22.05 refuses text after a bracket group, `n[1-2]-ib`, which this takes; it
// ignores a trailing ',', which this refuses). Grammar: entries separated by commas
// outside brackets; an entry is a name with any number of bracket groups, each a comma-separated
// list of numbers and ranges LO-HI (LO <= HI), which expand left to right, the last group
// varying fastest (`r[1-2]n[1-2]`: r1n1 r1n2 r2n1 r2n2). A range is zero-padded to the width of
// LO as written (`[08-10]`: 08 09 10; `[8-10]`: 8 9 10). `variable` names the source in errors.
// InvalidArgument for: an empty list or entry, an unbalanced or nested bracket, an empty group or
// range end, a character other than a digit, ',' or '-' inside brackets, LO > HI, a number of
// more than 18 digits, and more than kMaxHostlistHosts hosts.
Result<std::vector<std::string>> expand_hostlist(std::string_view text,
                                                 std::string_view variable = "SLURM_JOB_NODELIST");

// Expands SLURM_TASKS_PER_NODE: comma-separated entries `N` (N tasks on the next host) or
// `N(xR)` (N tasks on each of the next R hosts); N >= 1, R >= 1. InvalidArgument otherwise, and
// when the hosts add up to more than kMaxHostlistHosts.
Result<std::vector<int>> expand_tasks_per_node(std::string_view text,
                                               std::string_view variable = "SLURM_TASKS_PER_NODE");

}  // namespace gossip::daemon
