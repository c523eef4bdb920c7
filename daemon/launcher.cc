// gossipd launch. The children are plain `gossipd run` processes, so a launched cluster behaves
// exactly like one started by hand, systemd or Slurm; the launcher only starts, watches (by
// tailing the metrics files the nodes write anyway) and signals them.
#include "daemon/launcher.h"

#include <fcntl.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <set>
#include <thread>

#include "common/escape.h"
#include "common/log.h"
#include "config/load.h"
#include "daemon/checkpoint.h"
#include "daemon/dir_lock.h"
#include "daemon/exit_codes.h"
#include "daemon/metrics.h"
#include "daemon/node.h"
#include "daemon/outputs.h"
#include "daemon/run.h"
#include "sgd/backend.h"
#include "sgd/problem.h"
#include "topology/topology_file.h"

extern char** environ;

namespace gossip::daemon {
namespace {

std::atomic<int> g_signals{0};
void on_signal(int) { g_signals.fetch_add(1); }

// This machine's names and addresses: what a topology's host may say to mean "here".
std::set<std::string> local_addresses() {
  std::set<std::string> out = {"localhost", "0.0.0.0", "::", "::1"};
  char name[256] = {};
  if (gethostname(name, sizeof name - 1) == 0 && name[0] != '\0') {
    const std::string h = name;
    out.insert(h);
    out.insert(h.substr(0, h.find('.')));  // "n1" for "n1.cluster.example"
  }
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return out;
  for (ifaddrs* a = list; a != nullptr; a = a->ifa_next) {
    if (a->ifa_addr == nullptr) continue;
    int family = a->ifa_addr->sa_family;
    if (family != AF_INET && family != AF_INET6) continue;
    char host[NI_MAXHOST];
    socklen_t len = family == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6);
    if (getnameinfo(a->ifa_addr, len, host, sizeof host, nullptr, 0, NI_NUMERICHOST) == 0) {
      std::string h = host;
      out.insert(h.substr(0, h.find('%')));
    }
  }
  freeifaddrs(list);
  return out;
}

bool is_local(const std::string& host, const std::set<std::string>& local) {
  return host.rfind("127.", 0) == 0 || local.count(host) > 0;
}

// Spawns argv with stdout and stderr appended to `log_path`. Returns the pid or -1.
pid_t spawn(const std::vector<std::string>& argv, const std::string& log_path,
            const std::vector<std::string>& extra_env = {}) {
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  if (!log_path.empty()) {
    posix_spawn_file_actions_addopen(&actions, 1, log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND,
                                     0644);
    posix_spawn_file_actions_adddup2(&actions, 1, 2);
  }
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  std::vector<char*> envp;
  for (char** e = environ; *e != nullptr; ++e) envp.push_back(*e);
  for (const std::string& e : extra_env) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);
  pid_t pid = -1;
  int rc = posix_spawn(&pid, args[0], &actions, nullptr, args.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  return rc == 0 ? pid : -1;
}

int run_and_wait(const std::vector<std::string>& argv) {
  pid_t pid = spawn(argv, "");
  if (pid < 0) return -1;
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

struct NodeView {
  int id = 0;
  pid_t pid = -1;
  bool running = false;
  int exit_code = -1;  // 128 + signal when killed
  std::string metrics_path, log_path;
  pid_t trainer_pid = -1;  // attach mode with --trainer
  int trainer_exit = -1;
  std::streamoff offset = 0;
  std::string partial;
  double iteration = 0, loss = NAN, iteration_s = NAN, accuracy = NAN;
  double accuracy_at = 0;
  std::string last_event;
};

void read_new_lines(NodeView& n) {
  std::ifstream in(n.metrics_path, std::ios::binary);
  if (!in) return;
  in.seekg(0, std::ios::end);
  std::streamoff size = in.tellg();
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

// The newest iteration every local node holds a valid checkpoint for, or -1.
std::int64_t common_checkpoint(const TrainConfig& config, const topology::Topology& topo,
                               const std::vector<int>& nodes) {
  std::set<std::uint64_t> common;
  bool first = true;
  for (int i : nodes) {
    std::string dir = config.checkpoint().dir() + "/node-" + std::to_string(i);
    std::set<std::uint64_t> mine;
    auto names = Env::system().list_dir(dir);
    if (names.is_ok()) {
      for (const std::string& name : *names) {
        if (name.rfind("ckpt-", 0) != 0 || name.size() < 9 ||
            name.substr(name.size() - 4) != ".bin")
          continue;
        auto c = load_checkpoint_file(
            Env::system(), dir + "/" + name,
            {static_cast<std::uint32_t>(i), 0, 0, topo.fingerprint(), config_fingerprint(config)});
        if (c.is_ok()) {
          mine.insert(c->iteration);
        } else {
          GOSSIP_LOG(kWarning) << "resume: skipping " << c.status().to_string();
        }
      }
    }
    if (first) {
      common = mine;
      first = false;
    } else {
      std::set<std::uint64_t> both;
      std::set_intersection(common.begin(), common.end(), mine.begin(), mine.end(),
                            std::inserter(both, both.begin()));
      common = both;
    }
  }
  return common.empty() ? -1 : static_cast<std::int64_t>(*common.rbegin());
}

}  // namespace

int launch_command(const LaunchOptions& o) {
  set_log_prefix("launch");
  Result<TrainConfig> config_or = config::load_config_with_overrides(
      o.config_path, o.overrides, Env::system(),
      o.attach_dir.empty() ? config::ConfigUse::kOwnTrainer : config::ConfigUse::kAttachedTrainer);
  if (!config_or.is_ok()) {
    std::fprintf(stderr, "gossipd launch: %s\n", config_or.status().to_string().c_str());
    return kExitUsage;
  }
  const TrainConfig& config = *config_or;
  Result<topology::Topology> topo_or = topology::load_topology(o.topology_path);
  if (!topo_or.is_ok()) {
    std::fprintf(stderr, "gossipd launch: %s\n", topo_or.status().to_string().c_str());
    return kExitUsage;
  }
  const topology::Topology& topo = *topo_or;
  const int n = topo.num_nodes();
  if (topo.addresses().empty()) {
    std::fprintf(stderr, "gossipd launch: %s: nodes have no addresses\n", o.topology_path.c_str());
    return kExitUsage;
  }
  // The nodes to run here: those placed on --host, else those whose host is this machine.
  std::set<std::string> local = local_addresses();
  std::vector<int> nodes;
  std::set<std::string> hosts;
  for (int i = 0; i < n; ++i) {
    const std::string& h = topo.addresses()[i].host;
    hosts.insert(h);
    if (o.host.empty() ? is_local(h, local) : h == o.host) nodes.push_back(i);
  }
  if (nodes.empty()) {
    std::string names;
    for (const std::string& h : hosts) names += (names.empty() ? "" : ", ") + h;
    if (o.host.empty()) {
      std::fprintf(stderr,
                   "gossipd launch: no node of %s has an address on this machine (its hosts: "
                   "%s; --host NAME picks one)\n",
                   o.topology_path.c_str(), names.c_str());
    } else {
      std::fprintf(stderr,
                   "gossipd launch: --host %s: no node of %s is placed there (its hosts: %s)\n",
                   o.host.c_str(), o.topology_path.c_str(), names.c_str());
    }
    return kExitUsage;
  }
  // A throwaway CA made here would not be trusted by the nodes another launch starts elsewhere.
  if (!o.insecure && o.certs_dir.empty() && static_cast<int>(nodes.size()) < n) {
    std::fprintf(stderr,
                 "gossipd launch: %zu of the %d nodes of %s run elsewhere, so a throwaway CA made "
                 "here would not be trusted there: make the certificates once with "
                 "scripts/gen-certs.sh DIR %d JOB_ID, copy DIR to every host and pass --certs DIR "
                 "(or --insecure on a trusted network)\n",
                 n - nodes.size(), n, o.topology_path.c_str(), n);
    return kExitUsage;
  }
  Env& env = Env::system();
  // The workdir is this launch's until it exits: another launch there would delete its metrics
  // and final parameters (daemon/dir_lock.h).
  Result<std::shared_ptr<DirectoryLock>> workdir_lock =
      DirectoryLock::claim(o.workdir, "gossipd launch of " + o.topology_path);
  if (!workdir_lock.is_ok()) {
    std::fprintf(stderr, "gossipd launch: --workdir: %s%s\n",
                 log_escape(workdir_lock.status().message()).c_str(),
                 workdir_lock.status().code() == StatusCode::kFailedPrecondition
                     ? ": give this launch another --workdir, or stop the other one"
                     : "");
    return kExitUsage;
  }
  // Every output of every local node, before anything is removed or started (daemon/outputs.h).
  // The checkpoint directories are claimed only for the check: the nodes claim them for good.
  for (int i : nodes) {
    RunOutputs out =
        run_outputs(config, i, o.workdir + "/node-" + std::to_string(i) + "/metrics.jsonl",
                    o.workdir + "/final");
    Result<std::shared_ptr<DirectoryLock>> checked = claim_outputs(
        out, !o.resume && !o.resume_or_start, "gossipd launch, checking node " + std::to_string(i));
    if (!checked.is_ok()) {
      std::fprintf(stderr, "gossipd launch: node %d: %s\n", i,
                   log_escape(checked.status().message()).c_str());
      return kExitUsage;
    }
  }
  if (!o.attach_dir.empty()) {
    if (Status s = env.create_dirs(o.attach_dir); !s.is_ok()) {
      std::fprintf(stderr, "gossipd launch: --attach-dir: %s\n", s.to_string().c_str());
      return kExitError;
    }
  }

  // Certificates: a throwaway cluster CA unless the user brings one (or turns TLS off).
  std::string certs = o.certs_dir;
  const std::string job = job_id_for(config, topo);
  if (!o.insecure && certs.empty()) {
    certs = o.workdir + "/certs";
    std::string script = o.gen_certs_script;
    if (script.empty()) {
      const char* env_script = std::getenv("GOSSIP_GEN_CERTS");
      script = env_script != nullptr ? env_script : GOSSIP_SOURCE_DIR "/scripts/gen-certs.sh";
    }
    if (!env.file_exists(script)) {
      std::fprintf(
          stderr,
          "gossipd launch: cannot create certificates: %s not found (set GOSSIP_GEN_CERTS, "
          "or pass --certs DIR or --insecure)\n",
          script.c_str());
      return kExitUsage;
    }
    int rc = run_and_wait({"/bin/bash", script, certs, std::to_string(n), job});
    if (rc != 0) {
      std::fprintf(stderr, "gossipd launch: %s failed (exit %d)\n", script.c_str(), rc);
      return kExitError;
    }
  }

  std::int64_t resume_at = -1;
  if (o.resume || o.resume_or_start) {
    resume_at = common_checkpoint(config, topo, nodes);
    if (resume_at >= 0) {
      std::printf("resume: every node restarts from its checkpoint at iteration %lld\n",
                  static_cast<long long>(resume_at));
    } else if (o.resume) {
      // Starting from 0 would write a new run over the one the user asked to continue.
      std::fprintf(stderr,
                   "gossipd launch: --resume: no checkpoint iteration is held (valid, for this "
                   "config and topology) by all %zu nodes; nothing was started (give "
                   "--resume-or-start to start from iteration 0)\n",
                   nodes.size());
      return kExitCannotResume;
    } else {
      // --resume-or-start without a common cut: every node starts at 0 in a directory it owns.
      // What the directories held is moved aside, never deleted (checkpoint.h).
      const std::string tag = new_run_id();
      for (int i : nodes) {
        const std::string dir = config.checkpoint().dir() + "/node-" + std::to_string(i);
        // Moved only while no other process holds the directory.
        Result<std::shared_ptr<DirectoryLock>> held = claim_checkpoint_dir(dir, "gossipd launch");
        Result<std::string> aside =
            held.is_ok() ? set_aside_checkpoints(env, dir, tag) : held.status();
        if (!aside.is_ok()) {
          std::fprintf(stderr, "gossipd launch: --resume-or-start: %s\n",
                       aside.status().to_string().c_str());
          return kExitError;
        }
        if (!aside->empty())
          std::printf("resume: node %d's checkpoints moved to %s\n", i, aside->c_str());
      }
      std::printf(
          "resume: no checkpoint iteration is held by all %zu nodes; starting from "
          "iteration 0\n",
          nodes.size());
    }
  }

  // Signals: forwarded to the children from the loop below.
  struct sigaction sa = {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);

  const std::string final_dir = o.workdir + "/final";
  for (int i : nodes) (void)env.remove_file(final_dir + "/node_" + std::to_string(i) + ".f32");
  std::vector<NodeView> views;
  for (int i : nodes) {
    NodeView v;
    v.id = i;
    std::string dir = o.workdir + "/node-" + std::to_string(i);
    (void)env.create_dirs(dir);
    v.metrics_path = dir + "/metrics.jsonl";
    v.log_path = dir + "/log.txt";
    if (resume_at < 0) {
      (void)env.remove_file(v.metrics_path);
    } else {
      // Keep the history; show only what is new.
      std::ifstream in(v.metrics_path, std::ios::binary | std::ios::ate);
      if (in) v.offset = in.tellg();
    }
    std::vector<std::string> argv = {
        o.self_exe,    "run",       o.topology_path, "--node",        std::to_string(i), "--config",
        o.config_path, "--metrics", v.metrics_path,  "--dump-params", final_dir};
    for (const std::string& s : o.overrides) {
      argv.push_back("--set");
      argv.push_back(s);
    }
    argv.push_back("--set");
    argv.push_back("job_id=" + job);
    if (o.insecure) {
      argv.push_back("--insecure");
    } else {
      argv.push_back("--certs");
      argv.push_back(certs);
    }
    if (resume_at >= 0) {
      argv.push_back("--resume-at");
      argv.push_back(std::to_string(resume_at));
    }
    const std::string socket = o.attach_dir + "/node-" + std::to_string(i) + ".sock";
    if (!o.attach_dir.empty()) {
      argv.push_back("--attach");
      argv.push_back(socket);
    }
    v.pid = spawn(argv, v.log_path);
    if (v.pid < 0) {
      std::fprintf(stderr, "gossipd launch: could not start %s: %s\n", o.self_exe.c_str(),
                   std::strerror(errno));
      for (NodeView& w : views) kill(w.pid, SIGTERM);
      return kExitError;
    }
    v.running = true;
    std::ofstream(dir + "/pid") << v.pid << "\n";
    if (!o.trainer.empty()) {
      v.trainer_pid =
          spawn({"/bin/sh", "-c", o.trainer}, dir + "/trainer.log",
                {"GOSSIP_ATTACH_SOCKET=" + socket, "GOSSIP_NODE_ID=" + std::to_string(i),
                 "GOSSIP_NUM_NODES=" + std::to_string(n)});
      if (v.trainer_pid < 0) {
        std::fprintf(stderr, "gossipd launch: could not start the trainer: %s\n",
                     std::strerror(errno));
        kill(v.pid, SIGTERM);
        for (NodeView& w : views) {
          kill(w.pid, SIGTERM);
          if (w.trainer_pid > 0) kill(w.trainer_pid, SIGTERM);
        }
        return kExitError;
      }
      std::ofstream(dir + "/trainer.pid") << v.trainer_pid << "\n";
    }
    views.push_back(std::move(v));
  }
  std::printf("launched %zu of %d nodes of %s (%s), job %s; logs and metrics in %s/node-*/\n",
              views.size(), n, o.topology_path.c_str(),
              o.insecure ? "INSECURE plaintext links" : "TLS 1.3, mutual certificates", job.c_str(),
              o.workdir.c_str());
  std::fflush(stdout);

  const std::uint64_t total = config.iterations();
  auto start = std::chrono::steady_clock::now();
  auto last_print = start - std::chrono::hours(1);
  int forwarded = 0;
  std::size_t running = views.size();
  while (running > 0) {
    int sigs = g_signals.load();
    if (sigs > forwarded) {
      int sig = forwarded == 0 ? SIGTERM : SIGKILL;
      std::printf("\nlaunch: forwarding %s to the nodes\n", sig == SIGTERM ? "SIGTERM" : "SIGKILL");
      for (NodeView& v : views) {
        if (v.running) kill(v.pid, sig);
        if (v.trainer_pid > 0 && v.trainer_exit < 0) kill(v.trainer_pid, sig);
      }
      forwarded = sigs;
    }
    for (NodeView& v : views) {
      if (!v.running) continue;
      int status = 0;
      pid_t r = waitpid(v.pid, &status, WNOHANG);
      if (r == v.pid) {
        v.running = false;
        --running;
        v.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        read_new_lines(v);
        if (v.exit_code != kExitOk) {
          std::printf("\nnode %d exited: %s%s%s\n", v.id, describe_exit(v.exit_code).c_str(),
                      v.last_event.empty() ? "" : " — ", v.last_event.c_str());
          std::fflush(stdout);
        }
      }
    }
    auto now = std::chrono::steady_clock::now();
    if (std::chrono::duration<double>(now - last_print).count() >= o.progress_interval_s ||
        running == 0) {
      last_print = now;
      double sum_loss = 0, sum_acc = 0;
      int losses = 0, accs = 0;
      const NodeView* slowest = nullptr;
      double slowest_s = 0;
      double min_it = INFINITY;
      bool any_iteration = false;  // an attached trainer's daemon reports iterations, no loss
      for (NodeView& v : views) {
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
            (v.iteration == slowest->iteration && v.iteration_s > slowest_s)) {
          slowest = &v;
          slowest_s = v.iteration_s;
        }
      }
      double elapsed = std::chrono::duration<double>(now - start).count();
      char line[512];
      char loss[64] = "";
      if (losses) std::snprintf(loss, sizeof loss, "  mean loss %.4f", sum_loss / losses);
      std::snprintf(
          line, sizeof line,
          "[%6.1fs] iteration %6.0f%s%s  slowest node %d (it %.0f, %.1f ms/it)%s", elapsed, min_it,
          total > 0 ? ("/" + std::to_string(total)).c_str() : "", loss, slowest ? slowest->id : -1,
          slowest ? slowest->iteration : 0, slowest ? slowest->iteration_s * 1e3 : 0.0,
          accs ? ("  mean local test acc " + std::to_string(sum_acc / accs).substr(0, 6)).c_str()
               : "");
      if (losses == 0 && !any_iteration && running > 0) {
        std::snprintf(
            line, sizeof line,
            "[%6.1fs] starting: nodes are loading data and connecting to their neighbours",
            elapsed);
      }
      std::printf("%s\n", line);
      std::fflush(stdout);
    }
    if (running > 0) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }

  // Attached trainers: each gets BYE (or an ERROR) from its daemon and should end on its own; one
  // still running 30 s after every daemon ended is stopped.
  const auto trainers_deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  for (NodeView& v : views) {
    if (v.trainer_pid <= 0) continue;
    int status = 0;
    while (true) {
      const pid_t r = waitpid(v.trainer_pid, &status, WNOHANG);
      if (r == v.trainer_pid || (r < 0 && errno != EINTR)) break;
      if (std::chrono::steady_clock::now() > trainers_deadline) {
        std::printf("trainer of node %d still running after its daemon ended: SIGKILL\n", v.id);
        kill(v.trainer_pid, SIGKILL);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    v.trainer_exit = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    if (v.trainer_exit != 0) {
      std::printf("trainer of node %d exited: %s (output in %s/node-%d/trainer.log)\n", v.id,
                  describe_exit(v.trainer_exit).c_str(), o.workdir.c_str(), v.id);
    }
  }

  // Summary.
  int worst = kExitOk;
  std::printf("\n%-6s %-32s %10s %14s\n", "node", "exit", "iterations", "local test acc");
  std::string json = "{\"nodes\":[";
  for (std::size_t k = 0; k < views.size(); ++k) {
    const NodeView& v = views[k];
    if (severity(v.exit_code) > severity(worst)) worst = v.exit_code;
    const std::string acc =
        std::isfinite(v.accuracy) ? std::to_string(v.accuracy).substr(0, 6) : std::string("-");
    std::printf("%-6d %-32s %10.0f %14s\n", v.id, describe_exit(v.exit_code).c_str(), v.iteration,
                acc.c_str());
    json += std::string(k ? "," : "") + "{\"node\":" + std::to_string(v.id) +
            ",\"exit_code\":" + std::to_string(v.exit_code) +
            ",\"iterations\":" + json_number(v.iteration) +
            ",\"local_test_accuracy\":" + json_number(v.accuracy) + "}";
  }
  json += "]";

  // The average of all nodes' final models (only when every node of the job ran here and finished,
  // and the model is gossipd's own: an attached trainer's model is its own business).
  double avg_acc = NAN, avg_loss = NAN;
  if (worst == kExitOk && static_cast<int>(views.size()) == n && o.attach_dir.empty()) {
    Result<sgd::Problem> problem = sgd::make_problem(config::to_problem_config(config, n));
    if (problem.is_ok()) {
      const std::size_t d = problem->spec.num_params();
      std::vector<double> sum(d, 0.0);
      bool ok = true;
      for (int i = 0; i < n && ok; ++i) {
        auto bytes = env.read_file(final_dir + "/node_" + std::to_string(i) + ".f32");
        ok = bytes.is_ok() && bytes->size() == d * sizeof(float);
        if (!ok) break;
        const float* p = reinterpret_cast<const float*>(bytes->data());
        for (std::size_t k = 0; k < d; ++k) sum[k] += p[k];
      }
      auto backend = sgd::make_backend(sgd::Device::kCpu, 0);
      if (ok && backend.is_ok()) {
        std::vector<float> avg(d);
        for (std::size_t k = 0; k < d; ++k) avg[k] = static_cast<float>(sum[k] / n);
        auto model = (*backend)->make_model(problem->spec);
        if (model.is_ok()) {
          sgd::EvalResult e = (*model)->evaluate(avg.data(), *problem->test);
          avg_acc = e.accuracy;
          avg_loss = e.loss;
          std::printf(
              "\naveraged model (mean of %d nodes' final parameters): test accuracy %.4f, "
              "test loss %.4f on %lld examples\n",
              n, e.accuracy, e.loss, static_cast<long long>(e.examples));
        }
      } else {
        std::printf("\naveraged model: final parameters missing in %s\n", final_dir.c_str());
      }
    } else {
      std::printf("\naveraged model: %s\n", problem.status().to_string().c_str());
    }
  }
  double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  json += ",\"averaged_test_accuracy\":" + json_number(avg_acc) +
          ",\"averaged_test_loss\":" + json_number(avg_loss) + ",\"wall_s\":" + json_number(wall) +
          ",\"exit_code\":" + std::to_string(worst) + "}\n";
  (void)env.write_file_atomic(o.workdir + "/summary.json", json);
  std::printf("wall time %.1f s; exit code %d (%s)\n", wall, worst, describe_exit(worst).c_str());
  return worst > 128 ? kExitError : worst;
}

}  // namespace gossip::daemon
