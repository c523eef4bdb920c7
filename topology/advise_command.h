// `gossip-topo advise`: what to run on a link — topology, local steps, compression, overlap — with
// the numbers behind it and a training config snippet (sim/link_advice.h holds the rule; docs/
// topology.md "Advice for a link"). Part of the gossip-topo executable, which links gossip_sim for
// its cost model; the gossip_topology library does not.
#pragma once

#include <CLI/CLI.hpp>
#include <string>

#include "topology/link_flags.h"

namespace gossip::topology {

struct AdviseOptions {
  LinkFlags link;      // --bandwidth, --latency
  std::string params;  // --params N (e.g. 25M)
  std::string model;   // --model mlp|softmax: gossip-sim's Fashion-MNIST models
  int nodes = 8;
  std::string compute_time = "10ms";
  bool json = false;
};

// Adds the subcommand "advise" to `app`, its values going to `options` (which must outlive the
// parse).
CLI::App* add_advise_command(CLI::App& app, AdviseOptions& options);

// Runs it: prints the advice; 0, or 2 for a bad value (a unit, a model, a count).
int run_advise(const AdviseOptions& options);

}  // namespace gossip::topology
