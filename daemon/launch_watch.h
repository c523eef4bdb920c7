// What `gossipd launch` does once its nodes run (daemon/launcher.h): watch the children until
// every node ended — forwarding signals, stopping a node whose trainer died before attaching,
// printing the aggregated progress line from the nodes' metrics files — then collect the trainers,
// and say how the job ended: each node's exit and cause, the first failure, summary.json.
//
// A node's cause is the first error line of its log written during this launch (gossipd logs the
// reason for every non-zero exit, e.g. "a neighbour runs another configuration: ..."), else its
// last metrics event. The job's first failure is the cause of the node that failed first.
// Not thread-safe; the launcher's one thread uses all of it.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

namespace gossip::daemon {

// One local node as the launcher sees it: its processes, its files, what its metrics said.
struct NodeView {
  int id = 0;
  pid_t pid = -1;
  bool running = false;
  int exit_code = -1;   // 128 + signal when killed
  int exit_order = -1;  // 0 for the first node to end, 1 for the next, ...
  std::string metrics_path, log_path;
  long long log_offset = 0;  // where this launch's part of the (appended) log begins
  // Attach mode with --trainer: the trainer's process, its socket and log.
  pid_t trainer_pid = -1;
  std::string socket, trainer_log;
  int trainer_status = -1;        // the raw wait status once it ended, -1 while it runs
  int pending_status = -1;        // the node's wait status, collected early (not yet recorded)
  std::string stopped_because;    // why the launcher stopped the node ("" when it did not)
  bool stopped_with_job = false;  // stopped because another node failed with exit 2
  // The metrics file as read so far.
  long long offset = 0;
  std::string partial;
  double iteration = 0, loss = NAN, iteration_s = NAN, accuracy = NAN, accuracy_at = 0;
  std::string last_event;
  bool began_training = false;  // its log said its links are up (launch_watch.cc)
};

// gossipd's exit codes in words ("ok", "usage/config error", "killed by signal 9 (Killed)").
std::string describe_exit(int code);
// Any other program's wait status in words: "exit N" or "killed by signal S (name)" — and for an
// exit status 129..128+NSIG, which is how a shell reports a command killed by a signal, both.
std::string describe_status(int wait_status);
// The launcher's order of severity (docs/fault.md "Exit codes"): 2, 6, 5, 1 (and signals), 3 and
// 7, 4, 0.
int severity(int code);

// Reads what node `n`'s metrics file gained since the last call.
void read_new_lines(NodeView& n);

// The first error line of `log_path` from byte `from` on (a failing gossipd's own words, without
// the log header), or "".
std::string first_error_line(const std::string& log_path, long long from);
// Node `n`'s cause as described above ("" when it said nothing).
std::string cause_of(const NodeView& n);

struct WatchOptions {
  double progress_interval_s = 2.0;
  std::uint64_t total_iterations = 0;
  std::uint64_t metrics_every = 1;  // the config's: iterations per metrics line
};

// Runs until every node ended. `signals` counts SIGINT/SIGTERM received: the first is forwarded as
// SIGTERM to nodes and trainers, the next as SIGKILL. A trainer that ends while its node runs is
// reported at once; if its node is not serving an attached trainer (attach/server.h,
// probe_attach_socket), the node would wait timeouts.connect_ms for nobody: it is stopped
// (SIGTERM) and its exit counts as kExitTrainerGone, with the reason.
void watch_nodes(std::vector<NodeView>& nodes, const WatchOptions& options,
                 const std::atomic<int>& signals);

// After the nodes: waits for the trainers still running (each got BYE or an ERROR from its node),
// SIGKILLs any still running 30 s after the last node ended, and reports each non-zero exit.
void reap_trainers(std::vector<NodeView>& nodes);

// The summary table with each failing node's cause, and the worst exit code; *first_failure
// (when given) gets "node I: cause" of the first node to fail with that worst code ("" when none
// failed).
int print_summary(const std::vector<NodeView>& nodes, std::string* first_failure);

// summary.json: per node id, exit code, iterations, local test accuracy and cause; the averaged
// model's accuracy and loss (NaN: null), the wall time, the exit code and the first failure.
std::string summary_json(const std::vector<NodeView>& nodes, double averaged_accuracy,
                         double averaged_loss, double wall_s, int exit_code,
                         const std::string& first_failure);

}  // namespace gossip::daemon
