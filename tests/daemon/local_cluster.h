// n gossip-sgd nodes as threads of one test process over a LocalExchangeHub (header-only; shared
// by the tests of the driver with D-PSGD in tests/daemon).
#pragma once

#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "algorithms/dpsgd.h"
#include "config/train_config.h"
#include "daemon/driver.h"
#include "daemon/exit_codes.h"
#include "daemon/node.h"
#include "daemon/node_job.h"
#include "sgd/backend.h"
#include "tests/daemon/local_exchange_hub.h"

namespace gossip::testing {

// `text` parsed as a training config of `iterations` iterations (and learning rate `lr` when
// given), its defaults filled in and validated; the test fails when any of that fails.
inline config::TrainConfig valid_train_config(std::string_view text, std::uint64_t iterations,
                                              std::optional<double> lr = std::nullopt) {
  auto c = config::parse_train_config(text, "test");
  REQUIRE_MESSAGE(c.is_ok(), c.status().to_string());
  c->set_iterations(iterations);
  if (lr) c->mutable_optimizer()->set_lr(*lr);
  config::fill_defaults(*c);
  const Status valid = config::validate_train_config(*c);
  REQUIRE_MESSAGE(valid.is_ok(), valid.to_string());
  return *c;
}

// One D-PSGD node of `topo` training `problem` over `exchange`, as gossipd runs it: gossip_sgd's
// step, the start rules, the driver with algorithms::Dpsgd.
inline daemon::NodeResult run_dpsgd_node(const daemon::NodeOptions& o,
                                         const topology::Topology& topo,
                                         const sgd::Problem& problem, sgd::Backend& backend,
                                         daemon::ParameterExchange& exchange,
                                         const std::atomic<bool>& stop) {
  Result<daemon::NodeJob> job =
      daemon::make_sgd_job(o.config, problem, backend, o.node_id, topo.num_nodes());
  REQUIRE_MESSAGE(job.is_ok(), job.status().to_string());
  int code = daemon::kExitError;
  Result<daemon::NodeStart> start = daemon::open_node_start(o, topo, *job, &code);
  if (!start.is_ok()) {
    daemon::NodeResult r;
    r.exit_code = code;
    r.message = start.status().to_string();
    job->step->finish(r.message);
    return r;
  }
  algorithms::Dpsgd dpsgd(o.node_id, o.config, topo, exchange);
  return daemon::drive_node(o, *job, *start, backend, dpsgd,
                            algorithms::Neighbourhood::senders(topo, o.node_id), stop);
}

// Runs every node of `topo` except `dead` (failed in the hub, never started) as a thread; a node
// that returns drops out of the hub like an exiting process. Node i checkpoints to
// <dir>/ckpt/node-<i>, writes metrics to <dir>/metrics-<i>.jsonl and its final parameters to
// <dir>/params/node_<i>.f32.
inline std::vector<daemon::NodeResult> run_local_cluster(
    const topology::Topology& topo, const sgd::Problem& problem, const daemon::TrainConfig& config,
    const std::string& dir, daemon::LocalExchangeHub& hub, const std::vector<int>& dead,
    bool resume) {
  const int n = topo.num_nodes();
  std::vector<daemon::NodeResult> results(n);
  std::vector<std::thread> threads;
  std::atomic<bool> stop{false};
  for (int i : dead) hub.fail_node(i);
  for (int i = 0; i < n; ++i) {
    if (std::find(dead.begin(), dead.end(), i) != dead.end()) continue;
    threads.emplace_back([&, i] {
      daemon::NodeOptions o;
      o.node_id = i;
      o.config = config;
      o.checkpoint_dir = dir + "/ckpt/node-" + std::to_string(i);
      o.resume = resume;
      o.metrics_path = dir + "/metrics-" + std::to_string(i) + ".jsonl";
      o.dump_params_dir = dir + "/params";
      auto backend = sgd::make_backend(sgd::Device::kCpu, 1);
      REQUIRE(backend.is_ok());
      results[i] = run_dpsgd_node(o, topo, problem, **backend, hub.node(i), stop);
      hub.fail_node(i);
    });
  }
  for (auto& t : threads) t.join();
  return results;
}

}  // namespace gossip::testing
