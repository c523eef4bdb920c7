// gossipd launch. The children are plain `gossipd run` processes, so a launched cluster behaves
// exactly like one started by hand, systemd or Slurm; the launcher only starts, watches (by
// tailing the metrics files the nodes write anyway) and signals them. launch_command reads as its
// phases: load the inputs, place the nodes, own the workdir and check every output, make the
// certificates, find the resume cut, start the nodes and trainers, watch them (launch_watch.h),
// collect the trainers, summarize, evaluate the averaged model.
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
#include <memory>
#include <set>

#include "common/escape.h"
#include "common/log.h"
#include "config/load.h"
#include "config/sgd_config.h"
#include "daemon/checkpoint.h"
#include "daemon/dir_lock.h"
#include "daemon/exit_codes.h"
#include "daemon/launch_watch.h"
#include "daemon/metrics_server.h"
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

// What the phases build, in order.
struct Launch {
  explicit Launch(const LaunchOptions& options) : o(options) {}
  const LaunchOptions& o;
  TrainConfig config;
  topology::Topology topo;
  std::vector<int> nodes;  // the node ids that run here
  std::shared_ptr<DirectoryLock> workdir;
  std::string job, certs;
  std::int64_t resume_at = -1;  // the iteration every node restarts from; -1: from 0
  std::string final_dir;
};

// Prints "gossipd launch: <message>" and returns `code`: how a phase ends the launch.
int refuse(int code, const std::string& message) {
  std::fprintf(stderr, "gossipd launch: %s\n", log_escape(message).c_str());
  return code;
}

// The training config and the topology.
int load_inputs(Launch& l) {
  Result<TrainConfig> config = config::load_config_with_overrides(
      l.o.config_path, l.o.overrides, Env::system(),
      l.o.attach_dir.empty() ? config::ConfigUse::kOwnTrainer
                             : config::ConfigUse::kAttachedTrainer);
  if (!config.is_ok()) return refuse(kExitUsage, config.status().to_string());
  l.config = std::move(*config);
  Result<topology::Topology> topo = topology::load_topology(l.o.topology_path);
  if (!topo.is_ok()) return refuse(kExitUsage, topo.status().to_string());
  l.topo = std::move(*topo);
  if (l.topo.addresses().empty()) {
    return refuse(kExitUsage, l.o.topology_path + ": nodes have no addresses");
  }
  l.job = job_id_for(l.config, l.topo);
  l.final_dir = l.o.workdir + "/final";
  return kExitOk;
}

// --metrics-listen HOST:PORT gives node i HOST:(PORT + i): every such port must exist.
int check_metrics_listen(const Launch& l) {
  if (l.o.metrics_listen.empty()) return kExitOk;
  Result<ListenAddress> a = parse_listen_address(l.o.metrics_listen);
  if (!a.is_ok()) return refuse(kExitUsage, "--metrics-listen " + a.status().message());
  const int last = *std::max_element(l.nodes.begin(), l.nodes.end());
  if (a->port + last > 65535) {
    return refuse(kExitUsage, "--metrics-listen " + l.o.metrics_listen + ": node " +
                                  std::to_string(last) + " would listen on port " +
                                  std::to_string(a->port + last) +
                                  " (node i gets PORT + i); give a lower PORT");
  }
  return kExitOk;
}

// node i's --metrics-listen (check_metrics_listen passed): HOST:(PORT + i).
std::string metrics_listen_of(const LaunchOptions& o, int i) {
  const ListenAddress a = *parse_listen_address(o.metrics_listen);
  const std::string host = a.host.find(':') == std::string::npos ? a.host : "[" + a.host + "]";
  return host + ":" + std::to_string(a.port + i);
}

// The nodes to run here: those placed on --host, else those whose host is this machine.
int place_nodes(Launch& l) {
  const int n = l.topo.num_nodes();
  const std::set<std::string> local = local_addresses();
  std::set<std::string> hosts;
  for (int i = 0; i < n; ++i) {
    const std::string& h = l.topo.addresses()[i].host;
    hosts.insert(h);
    if (l.o.host.empty() ? is_local(h, local) : h == l.o.host) l.nodes.push_back(i);
  }
  if (l.nodes.empty()) {
    std::string names;
    for (const std::string& h : hosts) names += (names.empty() ? "" : ", ") + h;
    return refuse(kExitUsage, l.o.host.empty()
                                  ? "no node of " + l.o.topology_path +
                                        " has an address on this machine (its hosts: " + names +
                                        "; --host NAME picks one)"
                                  : "--host " + l.o.host + ": no node of " + l.o.topology_path +
                                        " is placed there (its hosts: " + names + ")");
  }
  // A throwaway CA made here would not be trusted by the nodes another launch starts elsewhere.
  if (!l.o.insecure && l.o.certs_dir.empty() && static_cast<int>(l.nodes.size()) < n) {
    return refuse(kExitUsage,
                  std::to_string(n - l.nodes.size()) + " of the " + std::to_string(n) +
                      " nodes of " + l.o.topology_path +
                      " run elsewhere, so a throwaway CA made here would not be trusted there: "
                      "make the certificates once with scripts/gen-certs.sh DIR " +
                      std::to_string(n) +
                      " JOB_ID, copy DIR to every host and pass --certs DIR (or --insecure on a "
                      "trusted network)");
  }
  return check_metrics_listen(l);
}

// The workdir is this launch's until it exits (another launch there would delete its metrics and
// final parameters: daemon/dir_lock.h); then every output of every local node is checked before
// anything is removed or started (daemon/outputs.h). The nodes' checkpoint directories are claimed
// only for the check: each node claims its own for good.
int own_workdir_and_check_outputs(Launch& l) {
  Result<std::shared_ptr<DirectoryLock>> workdir =
      DirectoryLock::claim(l.o.workdir, "gossipd launch of " + l.o.topology_path);
  if (!workdir.is_ok()) {
    const bool held = workdir.status().code() == StatusCode::kFailedPrecondition;
    return refuse(kExitUsage, "--workdir: " + workdir.status().message() +
                                  (held ? ": give this launch another --workdir, or stop the "
                                          "other one"
                                        : ""));
  }
  l.workdir = std::move(*workdir);
  const bool fresh = !l.o.resume && !l.o.resume_or_start;
  for (int i : l.nodes) {
    const RunOutputs out = run_outputs(
        l.config, i, l.o.workdir + "/node-" + std::to_string(i) + "/metrics.jsonl", l.final_dir);
    Result<std::shared_ptr<DirectoryLock>> checked =
        claim_outputs(out, fresh, "gossipd launch, checking node " + std::to_string(i));
    if (!checked.is_ok()) {
      return refuse(kExitUsage, "node " + std::to_string(i) + ": " + checked.status().message());
    }
  }
  if (!l.o.attach_dir.empty()) {
    if (Status s = Env::system().create_dirs(l.o.attach_dir); !s.is_ok()) {
      return refuse(kExitError, "--attach-dir: " + s.to_string());
    }
  }
  return kExitOk;
}

// A throwaway cluster CA unless the user brings one (or turns TLS off).
int make_certificates(Launch& l) {
  l.certs = l.o.certs_dir;
  if (l.o.insecure || !l.certs.empty()) return kExitOk;
  l.certs = l.o.workdir + "/certs";
  std::string script = l.o.gen_certs_script;
  if (script.empty()) {
    const char* env_script = std::getenv("GOSSIP_GEN_CERTS");
    script = env_script != nullptr ? env_script : GOSSIP_SOURCE_DIR "/scripts/gen-certs.sh";
  }
  if (!Env::system().file_exists(script)) {
    return refuse(kExitUsage, "cannot create certificates: " + script +
                                  " not found (set GOSSIP_GEN_CERTS, or pass --certs DIR or "
                                  "--insecure)");
  }
  const int rc =
      run_and_wait({"/bin/bash", script, l.certs, std::to_string(l.topo.num_nodes()), l.job});
  if (rc != 0) return refuse(kExitError, script + " failed (exit " + std::to_string(rc) + ")");
  return kExitOk;
}

// The newest iteration every local node holds a valid checkpoint for, or -1.
std::int64_t common_checkpoint(const Launch& l) {
  std::set<std::uint64_t> common;
  bool first = true;
  for (int i : l.nodes) {
    const std::string dir = node_checkpoint_dir(l.config.checkpoint().dir(), i);
    std::set<std::uint64_t> mine;
    auto names = Env::system().list_dir(dir);
    for (const std::string& name : names.is_ok() ? *names : std::vector<std::string>()) {
      if (name.rfind("ckpt-", 0) != 0 || name.size() < 9 || name.substr(name.size() - 4) != ".bin")
        continue;
      auto c = load_checkpoint_file(Env::system(), dir + "/" + name,
                                    {static_cast<std::uint32_t>(i), 0, 0, l.topo.fingerprint(),
                                     config_fingerprint(l.config)});
      if (c.is_ok()) {
        mine.insert(c->iteration);
      } else {
        GOSSIP_LOG(kWarning) << "resume: skipping " << c.status().to_string();
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

// --resume / --resume-or-start: where every node restarts (a consistent cut, passed as
// --resume-at), or, for --resume-or-start without one, every node's checkpoints moved aside (kept,
// never deleted: checkpoint.h) so that all start from 0 in directories they own.
int resume_cut(Launch& l) {
  if (!l.o.resume && !l.o.resume_or_start) return kExitOk;
  l.resume_at = common_checkpoint(l);
  if (l.resume_at >= 0) {
    std::printf("resume: every node restarts from its checkpoint at iteration %lld\n",
                static_cast<long long>(l.resume_at));
    return kExitOk;
  }
  if (l.o.resume) {
    // Starting from 0 would write a new run over the one the user asked to continue.
    return refuse(kExitCannotResume,
                  "--resume: no checkpoint iteration is held (valid, for this config and "
                  "topology) by all " +
                      std::to_string(l.nodes.size()) +
                      " nodes; nothing was started (give --resume-or-start to start from "
                      "iteration 0)");
  }
  const std::string tag = new_run_id();
  for (int i : l.nodes) {
    const std::string dir = node_checkpoint_dir(l.config.checkpoint().dir(), i);
    // Moved only while no other process holds the directory.
    Result<std::shared_ptr<DirectoryLock>> held = claim_checkpoint_dir(dir, "gossipd launch");
    Result<std::string> aside =
        held.is_ok() ? set_aside_checkpoints(Env::system(), dir, tag) : held.status();
    if (!aside.is_ok()) {
      return refuse(held.is_ok() ? kExitError : kExitUsage,
                    "--resume-or-start: " + aside.status().to_string());
    }
    if (!aside->empty())
      std::printf("resume: node %d's checkpoints moved to %s\n", i, aside->c_str());
  }
  std::printf(
      "resume: no checkpoint iteration is held by all %zu nodes; starting from "
      "iteration 0\n",
      l.nodes.size());
  return kExitOk;
}

// The `gossipd run` command line of node i.
std::vector<std::string> node_argv(const Launch& l, int i, const NodeView& v) {
  const LaunchOptions& o = l.o;
  std::vector<std::string> argv = {o.self_exe,        "run",           o.topology_path, "--node",
                                   std::to_string(i), "--config",      o.config_path,   "--metrics",
                                   v.metrics_path,    "--dump-params", l.final_dir};
  for (const std::string& s : o.overrides) {
    argv.push_back("--set");
    argv.push_back(s);
  }
  argv.push_back("--set");
  argv.push_back("job_id=" + l.job);
  if (o.insecure) {
    argv.push_back("--insecure");
  } else {
    argv.push_back("--certs");
    argv.push_back(l.certs);
  }
  if (l.resume_at >= 0) {
    argv.push_back("--resume-at");
    argv.push_back(std::to_string(l.resume_at));
  }
  if (!o.attach_dir.empty()) {
    argv.push_back("--attach");
    argv.push_back(v.socket);
  }
  if (!o.metrics_listen.empty()) {
    argv.push_back("--metrics-listen");
    argv.push_back(metrics_listen_of(o, i));
  }
  return argv;
}

// Stops every child started so far (a start that failed half way).
void stop_started(const std::vector<NodeView>& views) {
  for (const NodeView& w : views) {
    ::kill(w.pid, SIGTERM);
    if (w.trainer_pid > 0) ::kill(w.trainer_pid, SIGTERM);
  }
}

// Node i's files: a fresh run's metrics start empty; a resumed run's history is kept and only what
// is new is shown. Its log is appended to; this launch's part starts at log_offset.
NodeView prepare_node(const Launch& l, int i) {
  NodeView v;
  v.id = i;
  const std::string dir = l.o.workdir + "/node-" + std::to_string(i);
  (void)Env::system().create_dirs(dir);
  v.metrics_path = dir + "/metrics.jsonl";
  v.log_path = dir + "/log.txt";
  v.trainer_log = dir + "/trainer.log";
  v.socket = l.o.attach_dir + "/node-" + std::to_string(i) + ".sock";
  if (l.resume_at < 0) {
    (void)Env::system().remove_file(v.metrics_path);
  } else {
    std::ifstream in(v.metrics_path, std::ios::binary | std::ios::ate);
    if (in) v.offset = in.tellg();
  }
  std::ifstream log(v.log_path, std::ios::binary | std::ios::ate);
  if (log) v.log_offset = log.tellg();
  return v;
}

// Every local node as a child `gossipd run`, and its trainer with --trainer.
int start_nodes(const Launch& l, std::vector<NodeView>* views) {
  const LaunchOptions& o = l.o;
  for (int i : l.nodes) (void)Env::system().remove_file(dump_params_file(l.final_dir, i));
  for (int i : l.nodes) {
    NodeView v = prepare_node(l, i);
    const std::string dir = o.workdir + "/node-" + std::to_string(i);
    v.pid = spawn(node_argv(l, i, v), v.log_path);
    if (v.pid < 0) {
      const int err = errno;
      stop_started(*views);
      return refuse(kExitError, "could not start " + o.self_exe + ": " + std::strerror(err));
    }
    v.running = true;
    std::ofstream(dir + "/pid") << v.pid << "\n";
    if (!o.trainer.empty()) {
      v.trainer_pid =
          spawn({"/bin/sh", "-c", o.trainer}, v.trainer_log,
                {"GOSSIP_ATTACH_SOCKET=" + v.socket, "GOSSIP_NODE_ID=" + std::to_string(i),
                 "GOSSIP_NUM_NODES=" + std::to_string(l.topo.num_nodes())});
      if (v.trainer_pid < 0) {
        const int err = errno;
        ::kill(v.pid, SIGTERM);
        stop_started(*views);
        return refuse(kExitError,
                      std::string("could not start the trainer: ") + std::strerror(err));
      }
      std::ofstream(dir + "/trainer.pid") << v.trainer_pid << "\n";
    }
    views->push_back(std::move(v));
  }
  std::printf("launched %zu of %d nodes of %s (%s), job %s; logs and metrics in %s/node-*/\n",
              views->size(), l.topo.num_nodes(), o.topology_path.c_str(),
              o.insecure ? "INSECURE plaintext links" : "TLS 1.3, mutual certificates",
              l.job.c_str(), o.workdir.c_str());
  std::fflush(stdout);
  return kExitOk;
}

struct Averaged {
  double accuracy = NAN, loss = NAN;
};

// The test accuracy of the average of all nodes' final models: only when every node of the job
// ran here and finished, and the model is gossipd's own (an attached trainer's model is its own
// business).
Averaged evaluate_averaged_model(const Launch& l, std::size_t started, int worst) {
  const int n = l.topo.num_nodes();
  if (worst != kExitOk || static_cast<int>(started) != n || !l.o.attach_dir.empty()) return {};
  std::vector<std::string> files;
  for (int i = 0; i < n; ++i) files.push_back(dump_params_file(l.final_dir, i));
  Result<sgd::EvalResult> e = evaluate_mean(l.config, files);
  if (!e.is_ok()) {
    std::printf("\naveraged model: %s\n", e.status().to_string().c_str());
    return {};
  }
  std::printf(
      "\naveraged model (mean of %d nodes' final parameters): test accuracy %.4f, test loss %.4f "
      "on %lld examples\n",
      n, e->accuracy, e->loss, static_cast<long long>(e->examples));
  return {e->accuracy, e->loss};
}

}  // namespace

Result<sgd::EvalResult> evaluate_mean(const config::TrainConfig& config,
                                      std::span<const std::string> files) {
  if (files.empty()) return invalid_argument("no parameter files to average");
  GOSSIP_ASSIGN_OR_RETURN(sgd::Problem problem, sgd::make_problem(config::to_problem_config(
                                                    config, static_cast<int>(files.size()))));
  const std::size_t d = problem.spec.num_params();
  std::vector<double> sum(d, 0.0);
  for (const std::string& file : files) {
    Result<std::string> bytes = Env::system().read_file(file);
    if (!bytes.is_ok()) return invalid_argument(file + ": " + bytes.status().message());
    if (bytes->size() != d * sizeof(float)) {
      return invalid_argument(file + ": " + std::to_string(bytes->size()) +
                              " bytes, but the model of the config has " + std::to_string(d) +
                              " float32 parameters (" + std::to_string(d * sizeof(float)) +
                              " bytes)");
    }
    const auto* p = reinterpret_cast<const float*>(bytes->data());
    for (std::size_t k = 0; k < d; ++k) sum[k] += p[k];
  }
  std::vector<float> mean(d);
  for (std::size_t k = 0; k < d; ++k)
    mean[k] = static_cast<float>(sum[k] / static_cast<double>(files.size()));
  GOSSIP_ASSIGN_OR_RETURN(std::unique_ptr<sgd::Backend> backend,
                          sgd::make_backend(sgd::Device::kCpu, 0));
  GOSSIP_ASSIGN_OR_RETURN(std::unique_ptr<sgd::Model> model, backend->make_model(problem.spec));
  return model->evaluate(mean.data(), *problem.test);
}

int evaluate_command(const EvaluateOptions& o) {
  Result<config::TrainConfig> config =
      config::load_config_with_overrides(o.config_path, o.overrides);
  if (!config.is_ok()) {
    std::fprintf(stderr, "gossipd evaluate: %s\n", config.status().to_string().c_str());
    return kExitUsage;
  }
  Result<sgd::EvalResult> e = evaluate_mean(*config, o.files);
  if (!e.is_ok()) {
    std::fprintf(stderr, "gossipd evaluate: %s\n", e.status().to_string().c_str());
    return kExitUsage;
  }
  std::printf(
      "averaged model (mean of %zu parameter files): test accuracy %.4f, test loss %.4f on %lld "
      "examples\n",
      o.files.size(), e->accuracy, e->loss, static_cast<long long>(e->examples));
  return kExitOk;
}

int launch_command(const LaunchOptions& o) {
  set_log_prefix("launch");
  Launch l{o};
  for (int (*phase)(Launch&) :
       {load_inputs, place_nodes, own_workdir_and_check_outputs, make_certificates, resume_cut}) {
    if (const int rc = phase(l); rc != kExitOk) return rc;
  }
  // SIGINT/SIGTERM are counted by on_signal and forwarded to the children by watch_nodes.
  install_signal_handler(on_signal);
  std::vector<NodeView> views;
  if (const int rc = start_nodes(l, &views); rc != kExitOk) return rc;
  const auto start = std::chrono::steady_clock::now();
  watch_nodes(views, {o.progress_interval_s, l.config.iterations(), l.config.metrics_every()},
              g_signals);
  reap_trainers(views);
  std::string first_failure;
  const int worst = print_summary(views, &first_failure);
  const Averaged averaged = evaluate_averaged_model(l, views.size(), worst);
  const double wall =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  (void)Env::system().write_file_atomic(
      o.workdir + "/summary.json",
      summary_json(views, averaged.accuracy, averaged.loss, wall, worst, first_failure));
  std::printf("wall time %.1f s; exit code %d (%s)%s%s\n", wall, worst,
              describe_exit(worst).c_str(),
              first_failure.empty() ? "" : "; first failure: ", log_escape(first_failure).c_str());
  return worst > 128 ? kExitError : worst;
}

}  // namespace gossip::daemon
