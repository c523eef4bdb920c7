// `gossipd launch`: runs every node of a topology whose address is on this machine (its host is
// this machine's name, one of its addresses, or loopback) — or, with --host NAME, every node
// placed on NAME — as a child `gossipd run` process, and watches them:
//  - creates a throwaway CA and node certificates in <workdir>/certs with scripts/gen-certs.sh
//    when no --certs is given (TLS stays on), unless --insecure;
//  - child i logs to <workdir>/node-<i>/log.txt and writes metrics to
//    <workdir>/node-<i>/metrics.jsonl; its pid is in <workdir>/node-<i>/pid;
//  - prints one aggregated progress line per interval: iteration (of the slowest node), mean
//    loss over nodes, the slowest node, iterations per second;
//  - forwards SIGINT/SIGTERM to the children (a second signal sends SIGKILL);
//  - collects exit codes, prints a summary and the test accuracy of the average of all nodes'
//    final models (when every node ran here), and returns the most severe exit code;
//  - when some nodes run elsewhere, TLS needs one CA for all hosts: --certs (or --insecure) is
//    then required, a throwaway CA is refused;
//  - --metrics-listen HOST:PORT: node i serves Prometheus metrics on HOST:(PORT + i);
//  - --resume: every node restarts from the newest checkpoint iteration that ALL local nodes hold
//    a valid checkpoint for (a consistent cut), passed to the children as --resume-at.
#pragma once

#include <span>
#include <string>
#include <vector>

#include "common/status.h"
#include "config/train_config.h"
#include "sgd/backend.h"

namespace gossip::daemon {

struct LaunchOptions {
  std::string self_exe;  // path of the gossipd binary to run for each node
  std::string topology_path;
  std::string config_path;
  std::vector<std::string> overrides;
  std::string certs_dir;
  std::string host;  // run the nodes placed on this host; empty: those on this machine
  bool insecure = false;
  bool resume = false;
  bool resume_or_start = false;  // as resume, but start every node at 0 when there is no common cut
  // Attach mode (docs/attach.md): each node serves a trainer on attach_dir/node-<i>.sock; with
  // `trainer` (a shell command) the launcher also starts one per node, with GOSSIP_ATTACH_SOCKET,
  // GOSSIP_NODE_ID and GOSSIP_NUM_NODES in its environment and its output in node-<i>/trainer.log.
  std::string attach_dir;
  std::string trainer;
  // "HOST:PORT": node i serves its metrics on HOST:(PORT + i) (`gossipd run --metrics-listen`).
  std::string metrics_listen;
  std::string workdir = "gossip-run";
  double progress_interval_s = 2.0;
  std::string gen_certs_script;  // default: the source tree's scripts/gen-certs.sh
};

int launch_command(const LaunchOptions& options);

// `gossipd evaluate`: the test accuracy of the mean of parameter files (final/node_<i>.f32,
// --dump-params, final_params_path) of gossipd's own model under a training config — the figure
// `gossipd launch` prints at its end, for nodes that ran elsewhere.
struct EvaluateOptions {
  std::string config_path;
  std::vector<std::string> overrides;
  std::vector<std::string> files;
};
int evaluate_command(const EvaluateOptions& options);

// The test loss and accuracy of the element-wise mean of `files` (raw little-endian float32, one
// model each; summed in double) under `config`'s model and test set. InvalidArgument naming a file
// that cannot be read or does not hold the model's parameter count.
Result<sgd::EvalResult> evaluate_mean(const config::TrainConfig& config,
                                      std::span<const std::string> files);

}  // namespace gossip::daemon
