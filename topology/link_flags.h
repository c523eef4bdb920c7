// The link a cost model prices (comm_cost.h's Link), as gossip-topo (analyze, compare) and
// gossip-sim (run, compare, sweep) take it on the command line: one definition of the flags, their
// defaults, units and errors, so `--bandwidth 1Gbps --latency 1ms` means the same link to both.
// Header-only: the programs link CLI11, the gossip_topology library does not need it.
#pragma once

#include <CLI/CLI.hpp>
#include <string>

#include "common/status.h"
#include "common/units.h"
#include "topology/comm_cost.h"

namespace gossip::topology {

struct LinkFlags {
  std::string bandwidth = "1Gbps";  // common/units.h: a bare number is bits/s
  std::string latency = "1ms";      // one-way; a bare number is seconds

  // --bandwidth and --latency on `app`, with their defaults shown in --help.
  void add(CLI::App& app) {
    app.add_option("--bandwidth", bandwidth,
                   "link bandwidth B, e.g. 1Gbps, 100Mbit/s, 12.5MB/s (a bare number: bits/s)")
        ->capture_default_str();
    app.add_option("--latency", latency, "one-way link latency alpha, e.g. 1ms, 50us")
        ->capture_default_str();
  }

  // The link, payload priced at the nominal rate (payload_fraction 1). InvalidArgument naming the
  // flag and the text when a value does not parse.
  Result<Link> link() const {
    Link link;
    Result<double> bps = parse_bandwidth_bps(bandwidth);
    if (!bps.is_ok()) return bps.status().with_context("--bandwidth");
    Result<double> seconds = parse_duration_s(latency);
    if (!seconds.is_ok()) return seconds.status().with_context("--latency");
    link.bandwidth_bps = *bps;
    link.latency_s = *seconds;
    return link;
  }
};

}  // namespace gossip::topology
