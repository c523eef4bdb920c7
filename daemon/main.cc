// gossipd: the gossip-sgd node daemon. `run` is one node; `launch` runs every local node of a
// topology as child processes. See docs/daemon.md.
#include <execinfo.h>
#include <signal.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <climits>
#include <cstdio>
#include <string>
#include <vector>

#include "common/cli.h"
#include "config/flags.h"
#include "daemon/exit_codes.h"
#include "daemon/launcher.h"
#include "daemon/run.h"

namespace {

using namespace gossip::daemon;

std::string self_exe(const char* argv0) {
  char buf[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n > 0) return std::string(buf, static_cast<std::size_t>(n));
  return argv0;
}

// A crash (a bug, never a user error) leaves a backtrace in the node's log before dying with the
// original signal, so `gossipd launch` reports it and the log says where.
void on_crash(int sig) {
  void* frames[64];
  int n = backtrace(frames, 64);
  const char msg[] = "gossipd: fatal signal; backtrace:\n";
  (void)!write(STDERR_FILENO, msg, sizeof msg - 1);
  backtrace_symbols_fd(frames, n, STDERR_FILENO);
  signal(sig, SIG_DFL);
  raise(sig);
}

// `gossipd run`: one node in this process. Its options go to `run`, its --set and training flags
// (config/flags.h) to `overrides`, --resume-at to `resume_at` (counted on the returned option).
CLI::App* add_run_command(CLI::App& app, RunOptions& run, std::vector<std::string>& overrides,
                          std::uint64_t& resume_at, CLI::Option*& resume_at_opt) {
  CLI::App* cmd = app.add_subcommand("run", "run one node of a job in this process");
  auto* topology =
      cmd->add_option("topology", run.topology_path, "topology file (Protobuf text format)");
  auto* node = cmd->add_option("--node", run.node_id, "this node's id in the topology");
  cmd->add_flag("--from-env", run.from_env,
                "take the node id, node count and hosts from the scheduler (srun's SLURM_* "
                "variables, or a StatefulSet pod's name with GOSSIP_NODES, GOSSIP_SERVICE, "
                "POD_NAMESPACE) and generate the topology from the config's `topology` block, "
                "instead of TOPOLOGY and --node; listens on 0.0.0.0 unless --listen is given")
      ->excludes(topology)
      ->excludes(node);
  cmd->add_option("--config", run.config_path, "training config (Protobuf text format)")
      ->required();
  auto* certs = cmd->add_option("--certs", run.certs_dir,
                                "directory with ca.pem, node-<id>.pem, node-<id>.key "
                                "(scripts/gen-certs.sh); TLS 1.3 with mutual authentication");
  cmd->add_flag("--insecure", run.insecure,
                "plaintext, unauthenticated links (trusted networks only)")
      ->excludes(certs);
  auto* resume_flag = cmd->add_flag(
      "--resume", run.resume,
      "continue from the newest valid checkpoint of this node; exit 6 when there is none");
  cmd->add_flag("--resume-or-start", run.resume_or_start,
                "as --resume, but start from iteration 0 when no checkpoint is usable")
      ->excludes(resume_flag);
  cmd->add_option("--memory-cap", run.memory_cap,
                  "refuse a model whose buffers need more than this (e.g. 8GiB; default: the "
                  "machine's memory)")
      ->transform(CLI::AsSizeValue(false))
      ->type_name("BYTES");
  resume_at_opt = cmd->add_option("--resume-at", resume_at,
                                  "continue from this node's checkpoint of exactly this iteration");
  cmd->add_option("--dump-params", run.dump_params_dir,
                  "at the end write DIR/node_<id>.f32 (raw float32 parameters)");
  cmd->add_option("--metrics", run.metrics_path, "metrics JSON lines file ('-' for stdout)");
  cmd->add_option("--listen", run.listen_host, "address to listen on (default: this node's host)");
  cmd->add_option("--metrics-listen", run.metrics_listen,
                  "serve Prometheus metrics (GET /metrics) and GET /healthz over HTTP here")
      ->type_name("HOST:PORT");
  cmd->add_option("--attach", run.attach_socket,
                  "attach mode (docs/attach.md): serve one external trainer on this Unix "
                  "socket; it posts its parameters each iteration and gets the mixed ones "
                  "back, replacing gossipd's own model, data and optimizer (the config then "
                  "needs `iterations`)");
  cmd->add_flag("--print-config", run.print_config,
                "print the effective training config (file, overrides, defaults), then run");
  gossip::config::add_override_flags(*cmd, overrides);
  return cmd;
}

// `gossipd launch`: every local node of the topology as a child process.
CLI::App* add_launch_command(CLI::App& app, LaunchOptions& launch,
                             std::vector<std::string>& overrides) {
  CLI::App* cmd = app.add_subcommand(
      "launch", "run every node of the topology whose address is local, as child processes");
  cmd->add_option("topology", launch.topology_path, "topology file")->required();
  cmd->add_option("--config", launch.config_path, "training config")->required();
  auto* certs = cmd->add_option("--certs", launch.certs_dir,
                                "certificate directory (default: a throwaway CA in WORKDIR/certs)");
  cmd->add_flag("--insecure", launch.insecure, "plaintext links")->excludes(certs);
  cmd->add_option("--host", launch.host,
                  "run the nodes the topology places on this host (default: those whose "
                  "host is this machine's name or one of its addresses)");
  auto* resume = cmd->add_flag(
      "--resume", launch.resume,
      "restart every node from the newest checkpoint all of them hold (exit 6 when there is none)");
  cmd->add_flag("--resume-or-start", launch.resume_or_start,
                "as --resume, but when no checkpoint iteration is held by all nodes, move their "
                "checkpoints aside (kept) and start every node from iteration 0")
      ->excludes(resume);
  auto* attach = cmd->add_option(
      "--attach-dir", launch.attach_dir,
      "attach mode (docs/attach.md): node i serves an external trainer on DIR/node-<i>.sock "
      "instead of training gossipd's own model");
  cmd->add_option("--trainer", launch.trainer,
                  "with --attach-dir: a shell command started once per node, with "
                  "GOSSIP_ATTACH_SOCKET, GOSSIP_NODE_ID and GOSSIP_NUM_NODES in its environment; "
                  "its output goes to <workdir>/node-<i>/trainer.log")
      ->needs(attach);
  cmd->add_option("--metrics-listen", launch.metrics_listen,
                  "node i serves Prometheus metrics and /healthz on HOST:(PORT + i)")
      ->type_name("HOST:PORT");
  cmd->add_option("--workdir", launch.workdir, "logs, metrics, certificates, final parameters")
      ->capture_default_str();
  cmd->add_option("--progress-interval", launch.progress_interval_s,
                  "seconds between progress lines")
      ->capture_default_str();
  gossip::config::add_override_flags(*cmd, overrides);
  return cmd;
}

// `gossipd evaluate`: the averaged model of parameter files.
CLI::App* add_evaluate_command(CLI::App& app, EvaluateOptions& evaluate,
                               std::vector<std::string>& overrides) {
  CLI::App* cmd = app.add_subcommand(
      "evaluate",
      "print the test accuracy and loss of the mean of parameter files (final/node_<i>.f32, "
      "--dump-params, final_params_path) of the config's model, as `launch` does at its end");
  cmd->add_option("--config", evaluate.config_path, "training config (model and test set)")
      ->required();
  cmd->add_option("files", evaluate.files, "raw float32 parameter files, one model each")
      ->required();
  gossip::config::add_override_flags(*cmd, overrides);
  return cmd;
}

int gossipd_main(int argc, char** argv) {
  for (int sig : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT}) signal(sig, on_crash);
  CLI::App app{
      "gossipd: decentralized parallel SGD (D-PSGD) node daemon.\n"
      "Each node trains on its own shard and averages parameters with its topology neighbours.\n"
      "Exit codes: 0 done, 1 runtime error, 2 bad usage/config/topology, 3 a neighbour failed\n"
      "(fail-stop, checkpoint written), 4 stopped by SIGTERM/SIGINT (checkpoint written),\n"
      "5 diverged (NaN/Inf; nothing written), 6 --resume found no usable checkpoint."};
  app.require_subcommand(1);
  RunOptions run;
  std::vector<std::string> run_overrides;
  std::uint64_t resume_at = 0;
  CLI::Option* resume_at_opt = nullptr;
  CLI::App* run_cmd = add_run_command(app, run, run_overrides, resume_at, resume_at_opt);
  LaunchOptions launch;
  std::vector<std::string> launch_overrides;
  CLI::App* launch_cmd = add_launch_command(app, launch, launch_overrides);
  EvaluateOptions evaluate;
  std::vector<std::string> evaluate_overrides;
  CLI::App* evaluate_cmd = add_evaluate_command(app, evaluate, evaluate_overrides);

  static_assert(kExitUsage == gossip::kExitUsageError);
  if (const auto rc = gossip::parse_command_line(app, argc, argv)) return *rc;
  if (run_cmd->parsed()) {
    if (!run.from_env && (run.topology_path.empty() || run.node_id < 0)) {
      std::fprintf(stderr, "gossipd run: give TOPOLOGY and --node ID, or --from-env\n");
      return kExitUsage;
    }
    run.overrides = run_overrides;
    if (resume_at_opt->count() > 0) run.resume_at = resume_at;
    return run_command(run);
  }
  if (evaluate_cmd->parsed()) {
    evaluate.overrides = evaluate_overrides;
    return evaluate_command(evaluate);
  }
  (void)launch_cmd;
  launch.overrides = launch_overrides;
  launch.self_exe = self_exe(argv[0]);
  return launch_command(launch);
}

}  // namespace

int main(int argc, char** argv) {
  const int rc = gossip::guard_main("gossipd", [&] { return gossipd_main(argc, argv); });
  return gossip::finish_stdout("gossipd", rc);
}
