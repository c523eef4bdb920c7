// The watching half of gossipd launch (contract in launch_watch.h).
#include "daemon/launch_watch.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string_view>
#include <thread>

#include "attach/server.h"
#include "common/escape.h"
#include "common/json.h"
#include "daemon/exit_codes.h"
#include "daemon/metrics.h"

namespace gossip::daemon {
namespace {

using Clock = std::chrono::steady_clock;

// How long a probe of a node's attach socket waits for the refusal that says "attached": a server
// with an attached trainer answers from a thread of its own at once.
constexpr auto kProbeWait = std::chrono::seconds(2);
// The most of a log read for its first error line.
constexpr std::streamsize kMaxLogRead = 1 << 20;

int wait_status_code(int status) {
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// The first kMaxLogRead bytes of the log at `log_path` from byte `from` on ("" when unreadable).
std::string read_log(const std::string& log_path, long long from) {
  std::ifstream in(log_path, std::ios::binary);
  if (!in) return "";
  in.seekg(from);
  std::string text(static_cast<std::size_t>(kMaxLogRead), '\0');
  in.read(text.data(), kMaxLogRead);
  text.resize(static_cast<std::size_t>(in.gcount()));
  return text;
}

// Whether node `n`'s trainer attached (daemon/run.cc logs "trainer attached: " once the HELLO is
// done).
bool log_says_attached(const NodeView& n) {
  return read_log(n.log_path, n.log_offset).find("] trainer attached: ") != std::string::npos;
}

// Whether node `n` has begun training: daemon/run.cc logs "connected to N neighbours", or under
// fault.policy CARRY_ON "... starting anyway", once its links are up. Remembered once seen.
bool began_training(NodeView& n) {
  if (!n.began_training) {
    const std::string text = read_log(n.log_path, n.log_offset);
    n.began_training = text.find("] connected to ") != std::string::npos ||
                       text.find("; starting anyway") != std::string::npos;
  }
  return n.began_training;
}

// Trainers seen ended while their nodes run: each is reported; a node not serving an attached
// trainer is stopped, since it would wait timeouts.connect_ms for nobody. The probes run side by
// side (each waits up to kProbeWait for a node that is waiting for its trainer).
void on_trainers_ended(const std::vector<NodeView*>& ended) {
  std::vector<attach::AttachSocketState> states(ended.size());
  std::vector<std::thread> probes;
  for (std::size_t k = 0; k < ended.size(); ++k) {
    probes.emplace_back(
        [&, k] { states[k] = attach::probe_attach_socket(ended[k]->socket, kProbeWait); });
  }
  for (std::thread& t : probes) t.join();
  for (std::size_t k = 0; k < ended.size(); ++k) {
    NodeView& n = *ended[k];
    const std::string how = describe_status(n.trainer_status);
    // Attached, now or before: a trainer that died mid-run leaves the server's slot free again
    // by the time of the probe, but its node has begun training and leaves the group by itself.
    if (states[k] == attach::AttachSocketState::kTrainerAttached || log_says_attached(n)) {
      // Its node sees the trainer gone at its next wait and leaves the group by itself.
      if (n.trainer_status != 0) {
        std::printf("\ntrainer of node %d exited: %s (output in %s)\n", n.id, how.c_str(),
                    n.trainer_log.c_str());
      }
      continue;
    }
    // Not served: the node is still starting (it will wait for a trainer) or in its last moments
    // (its server is gone once its run is over): a node about to end is left to end.
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    int status = 0;
    if (::waitpid(n.pid, &status, WNOHANG) == n.pid) {
      // Its node ended too (it saw the trainer gone): the trainer's end is still reported.
      n.pending_status = status;
      if (n.trainer_status != 0) {
        std::printf("\ntrainer of node %d exited: %s (output in %s)\n", n.id, how.c_str(),
                    n.trainer_log.c_str());
      }
      continue;
    }
    n.stopped_because =
        "its trainer exited (" + how + ") before attaching; stopped by the launcher";
    std::printf("\ntrainer of node %d exited: %s (output in %s)\nnode %d: %s\n", n.id, how.c_str(),
                n.trainer_log.c_str(), n.id, n.stopped_because.c_str());
    ::kill(n.pid, SIGTERM);
  }
}

// Forwards the signals received since the last call: SIGTERM first, SIGKILL after.
void forward_signals(std::vector<NodeView>& nodes, const std::atomic<int>& signals,
                     int* forwarded) {
  const int received = signals.load();
  if (received <= *forwarded) return;
  const int sig = *forwarded == 0 ? SIGTERM : SIGKILL;
  std::printf("\nlaunch: forwarding %s to the nodes\n", sig == SIGTERM ? "SIGTERM" : "SIGKILL");
  for (NodeView& v : nodes) {
    if (v.running) ::kill(v.pid, sig);
    if (v.trainer_pid > 0 && v.trainer_status < 0) ::kill(v.trainer_pid, sig);
  }
  *forwarded = received;
}

// Records node `v`'s end from its wait status.
void node_ended(NodeView& v, int status, int* ended) {
  v.running = false;
  v.exit_order = (*ended)++;
  v.exit_code = wait_status_code(status);
  // A node stopped because its trainer never came ended as a node whose trainer never connects
  // would (exit 7), only sooner. One stopped with the job ended as a node stopped by a signal
  // does (exit 4), whether the SIGTERM found its handler installed or not; a node that ended by
  // itself meanwhile keeps its own code.
  if (v.stopped_with_job) {
    if (v.exit_code == 128 + SIGTERM) v.exit_code = kExitStopped;
    if (v.exit_code != kExitStopped) v.stopped_because.clear();  // its own end: its own cause
  } else if (!v.stopped_because.empty()) {
    v.exit_code = kExitTrainerGone;
  }
  read_new_lines(v);
  // Nodes stopped with the job are listed in the summary; the line goes to the node that failed.
  if (v.exit_code != kExitOk && !(v.stopped_with_job && v.exit_code == kExitStopped)) {
    const std::string cause = cause_of(v);
    std::printf("\nnode %d exited: %s%s%s\n", v.id, describe_exit(v.exit_code).c_str(),
                cause.empty() ? "" : " — ", log_escape(cause).c_str());
  }
}

// A usage/config error (exit 2) on one node makes the whole job another job than the one asked
// for, and its neighbours could only wait timeouts.connect_ms for it: every other node and every
// trainer still running is stopped at once (SIGTERM), each told why.
void stop_job(std::vector<NodeView>& nodes, const NodeView& failed) {
  std::printf("launch: node %d failed with a usage/config error: stopping every node of the job\n",
              failed.id);
  for (NodeView& v : nodes) {
    if (v.trainer_pid > 0 && v.trainer_status < 0 && v.running) ::kill(v.trainer_pid, SIGTERM);
    if (!v.running) continue;
    v.stopped_with_job = true;
    v.stopped_because = "stopped by the launcher: node " + std::to_string(failed.id) +
                        " failed with a usage/config error";
    ::kill(v.pid, SIGTERM);
  }
}

// Collects the children that ended (nodes, then trainers); returns how many nodes still run.
// The first node to end with a usage/config error stops the job (stop_job).
std::size_t reap(std::vector<NodeView>& nodes, int* ended, bool* job_stopped) {
  for (NodeView& v : nodes) {
    int status = 0;
    if (v.running && v.pending_status >= 0) {
      node_ended(v, v.pending_status, ended);
    } else if (v.running && ::waitpid(v.pid, &status, WNOHANG) == v.pid) {
      node_ended(v, status, ended);
    } else {
      continue;
    }
    if (v.exit_code == kExitUsage && !*job_stopped) {
      *job_stopped = true;
      stop_job(nodes, v);
    }
  }
  std::vector<NodeView*> trainers_ended;
  for (NodeView& v : nodes) {
    int status = 0;
    if (v.trainer_pid > 0 && v.trainer_status < 0 &&
        ::waitpid(v.trainer_pid, &status, WNOHANG) == v.trainer_pid) {
      v.trainer_status = status;
      if (v.stopped_with_job) {
        continue;  // the launcher stopped it (stop_job)
      } else if (v.running) {
        trainers_ended.push_back(&v);
      } else if (status != 0) {
        std::printf("trainer of node %d exited: %s (output in %s)\n", v.id,
                    describe_status(status).c_str(), v.trainer_log.c_str());
      }
    }
  }
  if (!trainers_ended.empty()) on_trainers_ended(trainers_ended);
  std::fflush(stdout);
  return static_cast<std::size_t>(
      std::count_if(nodes.begin(), nodes.end(), [](const NodeView& v) { return v.running; }));
}

// One aggregated progress line.
void print_progress(std::vector<NodeView>& nodes, const WatchOptions& o, double elapsed_s,
                    bool any_running) {
  double sum_loss = 0, sum_acc = 0, min_it = INFINITY;
  int losses = 0, accs = 0;
  const NodeView* slowest = nullptr;
  bool any_iteration = false;  // an attached trainer's daemon reports iterations, no loss
  for (NodeView& v : nodes) {
    read_new_lines(v);
    if (std::isfinite(v.loss)) {
      sum_loss += v.loss;
      ++losses;
    }
    if (std::isfinite(v.accuracy)) {
      sum_acc += v.accuracy;
      ++accs;
    }
    min_it = std::min(min_it, v.iteration);
    any_iteration = any_iteration || v.iteration > 0;
    if (slowest == nullptr || v.iteration < slowest->iteration ||
        (v.iteration == slowest->iteration && v.iteration_s > slowest->iteration_s)) {
      slowest = &v;
    }
  }
  char line[512];
  if (losses == 0 && !any_iteration && any_running) {
    // No metrics line yet: say how far the start went, from the nodes' logs. A job whose
    // iterations are long (rounds of many local steps) writes its first line only after
    // metrics_every of them.
    int running = 0, training = 0;
    for (NodeView& v : nodes) {
      if (!v.running) continue;
      ++running;
      training += began_training(v) ? 1 : 0;
    }
    if (training == 0) {
      std::snprintf(line, sizeof line,
                    "[%6.1fs] starting: nodes are loading data and connecting to their neighbours",
                    elapsed_s);
    } else if (training < running) {
      std::snprintf(line, sizeof line,
                    "[%6.1fs] starting: %d of %d nodes connected to their neighbours", elapsed_s,
                    training, running);
    } else {
      std::snprintf(line, sizeof line,
                    "[%6.1fs] training: every node is connected; the first progress comes after "
                    "metrics_every=%llu iterations",
                    elapsed_s, static_cast<unsigned long long>(o.metrics_every));
    }
  } else {
    char loss[64] = "";
    if (losses) std::snprintf(loss, sizeof loss, "  mean loss %.4f", sum_loss / losses);
    const std::string of_total =
        o.total_iterations > 0 ? "/" + std::to_string(o.total_iterations) : "";
    const std::string acc =
        accs ? "  mean local test acc " + std::to_string(sum_acc / accs).substr(0, 6) : "";
    std::snprintf(
        line, sizeof line, "[%6.1fs] iteration %6.0f%s%s  slowest node %d (it %.0f, %.1f ms/it)%s",
        elapsed_s, min_it, of_total.c_str(), loss, slowest ? slowest->id : -1,
        slowest ? slowest->iteration : 0, slowest ? slowest->iteration_s * 1e3 : 0.0, acc.c_str());
  }
  std::printf("%s\n", line);
  std::fflush(stdout);
}

}  // namespace

int severity(int code) {
  switch (code) {
    case kExitUsage:
      return 7;
    case kExitCannotResume:
      return 6;
    case kExitDiverged:
      return 5;
    case kExitError:
      return 4;
    case kExitNeighbourFailed:
    case kExitTrainerGone:
      return 3;
    case kExitStopped:
      return 2;
    case kExitOk:
      return 0;
    default:
      return 4;  // killed by a signal or unknown
  }
}

std::string describe_exit(int code) {
  switch (code) {
    case kExitOk:
      return "ok";
    case kExitError:
      return "error";
    case kExitUsage:
      return "usage/config error";
    case kExitNeighbourFailed:
      return "neighbour failed (fail-stop)";
    case kExitStopped:
      return "stopped by signal";
    case kExitDiverged:
      return "diverged (loss or parameters NaN/Inf)";
    case kExitCannotResume:
      return "no usable checkpoint to resume";
    case kExitTrainerGone:
      return "attached trainer gone (left the group)";
    default:
      if (code > 128) {
        return "killed by signal " + std::to_string(code - 128) + " (" + strsignal(code - 128) +
               ")";
      }
      return "exit " + std::to_string(code);
  }
}

std::string describe_status(int wait_status) {
  if (WIFSIGNALED(wait_status)) {
    const int sig = WTERMSIG(wait_status);
    return "killed by signal " + std::to_string(sig) + " (" + strsignal(sig) + ")";
  }
  const int code = WEXITSTATUS(wait_status);
  // A trainer runs under /bin/sh -c: a shell reports a command killed by signal S as 128 + S.
  if (code > 128 && code < 128 + NSIG) {
    return "exit " + std::to_string(code) + ", as a shell reports a command killed by signal " +
           std::to_string(code - 128) + " (" + strsignal(code - 128) + ")";
  }
  return "exit " + std::to_string(code);
}

void read_new_lines(NodeView& n) {
  std::ifstream in(n.metrics_path, std::ios::binary);
  if (!in) return;
  in.seekg(0, std::ios::end);
  const long long size = in.tellg();
  if (size < n.offset) n.offset = 0;  // truncated (fresh run)
  if (size == n.offset) return;
  in.seekg(n.offset);
  std::string chunk(static_cast<std::size_t>(size - n.offset), '\0');
  in.read(chunk.data(), static_cast<std::streamsize>(chunk.size()));
  n.offset = size;
  n.partial += chunk;
  std::size_t start = 0, nl;
  while ((nl = n.partial.find('\n', start)) != std::string::npos) {
    auto obj = parse_flat_json(std::string_view(n.partial).substr(start, nl - start));
    start = nl + 1;
    if (!obj.is_ok()) continue;
    auto& m = *obj;
    const std::string& type = m["type"].text;
    if (type == "iter") {
      n.iteration = m["iteration"].number;
      n.loss = m["loss"].is_null ? NAN : m["loss"].number;
      n.iteration_s = m["iteration_s"].number;
    } else if (type == "eval") {
      n.accuracy = m["test_accuracy"].is_null ? NAN : m["test_accuracy"].number;
      n.accuracy_at = m["iteration"].number;
    } else if (type == "event") {
      n.last_event = m["event"].text + ": " + m["detail"].text;
    }
  }
  n.partial.erase(0, start);
}

std::string first_error_line(const std::string& log_path, long long from) {
  const std::string text = read_log(log_path, from);
  std::size_t start = 0;
  for (std::size_t nl; start < text.size(); start = nl + 1) {
    nl = text.find('\n', start);
    if (nl == std::string::npos) nl = text.size();
    const std::string_view line = std::string_view(text).substr(start, nl - start);
    // "gossipd run: <message>" (a usage error), or "E hh:mm:ss.mmm [node i] file.cc:123:
    // <message>".
    constexpr std::string_view kUsage = "gossipd run: ";
    if (line.substr(0, kUsage.size()) == kUsage) return std::string(line.substr(kUsage.size()));
    if (line.substr(0, 2) != "E ") continue;
    std::size_t at = line.find("] ");
    at = line.find(": ", at == std::string_view::npos ? 2 : at + 2);
    if (at != std::string_view::npos) return std::string(line.substr(at + 2));
  }
  return "";
}

std::string cause_of(const NodeView& n) {
  std::string cause = first_error_line(n.log_path, n.log_offset);
  if (cause.empty()) cause = n.last_event;
  if (!n.stopped_because.empty()) cause = n.stopped_because + (cause.empty() ? "" : ": " + cause);
  return cause;
}

void watch_nodes(std::vector<NodeView>& nodes, const WatchOptions& options,
                 const std::atomic<int>& signals) {
  const auto start = Clock::now();
  auto last_print = start - std::chrono::hours(1);
  int forwarded = 0, ended = 0;
  bool job_stopped = false;
  for (std::size_t running = nodes.size(); running > 0;) {
    forward_signals(nodes, signals, &forwarded);
    running = reap(nodes, &ended, &job_stopped);
    const auto now = Clock::now();
    if (std::chrono::duration<double>(now - last_print).count() >= options.progress_interval_s ||
        running == 0) {
      last_print = now;
      print_progress(nodes, options, std::chrono::duration<double>(now - start).count(),
                     running > 0);
    }
    if (running > 0) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

void reap_trainers(std::vector<NodeView>& nodes) {
  const auto deadline = Clock::now() + std::chrono::seconds(30);
  for (NodeView& v : nodes) {
    if (v.trainer_pid <= 0 || v.trainer_status >= 0) continue;
    int status = 0;
    for (;;) {
      const pid_t r = ::waitpid(v.trainer_pid, &status, WNOHANG);
      if (r == v.trainer_pid || (r < 0 && errno != EINTR)) break;
      if (Clock::now() > deadline) {
        std::printf("trainer of node %d still running after its daemon ended: SIGKILL\n", v.id);
        ::kill(v.trainer_pid, SIGKILL);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    v.trainer_status = status;
    if (status != 0 && !v.stopped_with_job) {
      std::printf("trainer of node %d exited: %s (output in %s)\n", v.id,
                  describe_status(status).c_str(), v.trainer_log.c_str());
    }
  }
}

int print_summary(const std::vector<NodeView>& nodes, std::string* first_failure) {
  int worst = kExitOk;
  const NodeView* first = nullptr;
  std::printf("\n%-6s %-32s %10s %14s\n", "node", "exit", "iterations", "local test acc");
  for (const NodeView& v : nodes) {
    if (severity(v.exit_code) > severity(worst)) worst = v.exit_code;
  }
  // The first failure is the first node to end with the job's exit code: a node that ended on a
  // neighbour's goodbye (exit 3) before that neighbour's own exit 2 is a consequence, not the
  // cause.
  for (const NodeView& v : nodes) {
    if (v.exit_code != kExitOk && severity(v.exit_code) == severity(worst) &&
        (first == nullptr || v.exit_order < first->exit_order)) {
      first = &v;
    }
  }
  for (const NodeView& v : nodes) {
    const std::string acc =
        std::isfinite(v.accuracy) ? std::to_string(v.accuracy).substr(0, 6) : std::string("-");
    std::printf("%-6d %-32s %10.0f %14s\n", v.id, describe_exit(v.exit_code).c_str(), v.iteration,
                acc.c_str());
  }
  for (const NodeView& v : nodes) {
    if (v.exit_code == kExitOk) continue;
    if (const std::string cause = cause_of(v); !cause.empty()) {
      std::printf("node %d: %s\n", v.id, log_escape(cause).c_str());
    }
  }
  if (first_failure != nullptr) {
    *first_failure = "";
    if (first != nullptr) {
      const std::string cause = cause_of(*first);
      *first_failure = "node " + std::to_string(first->id) + ": " +
                       (cause.empty() ? describe_exit(first->exit_code) : cause);
    }
  }
  return worst;
}

std::string summary_json(const std::vector<NodeView>& nodes, double averaged_accuracy,
                         double averaged_loss, double wall_s, int exit_code,
                         const std::string& first_failure) {
  JsonWriter w;
  w.begin_object().key("nodes").begin_array();
  for (const NodeView& v : nodes) {
    const std::string cause = v.exit_code == kExitOk ? "" : cause_of(v);
    w.begin_object()
        .key("node")
        .integer(v.id)
        .key("exit_code")
        .integer(v.exit_code)
        .key("iterations")
        .number(v.iteration, kMetricsDigits)
        .key("local_test_accuracy")
        .number(v.accuracy, kMetricsDigits);
    if (!cause.empty()) w.key("cause").string(cause);
    w.end_object();
  }
  w.end_array()
      .key("averaged_test_accuracy")
      .number(averaged_accuracy, kMetricsDigits)
      .key("averaged_test_loss")
      .number(averaged_loss, kMetricsDigits)
      .key("wall_s")
      .number(wall_s, kMetricsDigits)
      .key("exit_code")
      .integer(exit_code);
  if (!first_failure.empty()) w.key("first_failure").string(first_failure);
  w.end_object();
  return w.text() + "\n";
}

}  // namespace gossip::daemon
