// `gossipd run`: one node of a job as this process — loads the topology and training config,
// builds the node's problem and backend, starts the transport (TLS unless --insecure), waits for
// the neighbours, runs the D-PSGD loop (daemon/node.h) or, with algorithm ALLREDUCE, the C-PSGD
// loop over Gloo (daemon/allreduce.h), and shuts the links down cleanly.
// SIGTERM and SIGINT request a stop: checkpoint, then exit kExitStopped.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "config/train_config.h"
#include "topology/topology.h"

namespace gossip::daemon {

struct RunOptions {
  std::string topology_path;
  std::string config_path;
  int node_id = -1;
  // Instead of topology_path and node_id: the scheduler's environment gives the node id and the
  // hosts, the config's `topology` block the generator (daemon/scheduler_env.h).
  bool from_env = false;
  std::vector<std::string> overrides;  // "path=value", applied in order
  std::string certs_dir;  // ca.pem, node-<id>.pem, node-<id>.key (scripts/gen-certs.sh)
  bool insecure = false;
  bool resume = false;
  bool resume_or_start = false;
  std::optional<std::uint64_t> resume_at;
  std::uint64_t memory_cap = 0;  // bytes the model's buffers may take; 0 = the machine's memory
  std::string dump_params_dir;
  std::string metrics_path;  // overrides the config's metrics_path when set
  std::string listen_host;   // default: the host of this node's address in the topology
  // "HOST:PORT": serve Prometheus metrics and /healthz there (daemon/metrics_server.h); "" none.
  std::string metrics_listen;
  // Attach mode (docs/attach.md): serve one external trainer on this Unix socket; its step
  // replaces gossipd's own model, data and optimizer.
  std::string attach_socket;
  bool print_config = false;
};

// The job id announced in Hello and named by certificates (OU): the config's job_id, else the
// topology's name, else "gossip"; characters outside [A-Za-z0-9._-] become '_'.
std::string job_id_for(const config::TrainConfig& config, const topology::Topology& topology);

// Returns the process exit code (daemon/exit_codes.h).
int run_command(const RunOptions& options);

// Installs `handler` for SIGTERM and SIGINT, the signals that stop a run or a launch.
void install_signal_handler(void (*handler)(int));
// Installs SIGTERM/SIGINT handlers that stop run_command: it checkpoints and returns kExitStopped.
void install_stop_handlers();

}  // namespace gossip::daemon
