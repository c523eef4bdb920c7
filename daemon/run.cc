// gossipd run. The phases run in an order chosen so that every user error (flags, config,
// topology, outputs, a run that cannot start) is reported before any data is loaded or any socket
// is opened, and a trainer's size is known before the Hello to the neighbours carries it.
#include "daemon/run.h"

#include <signal.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <limits>
#include <memory>

#include "algorithms/factory.h"
#include "attach/server.h"
#include "common/escape.h"
#include "common/log.h"
#include "common/memory.h"
#include "config/load.h"
#include "config/sgd_config.h"
#include "daemon/algorithm.h"
#include "daemon/attach_step.h"
#include "daemon/checkpoint.h"
#include "daemon/driver.h"
#include "daemon/exit_codes.h"
#include "daemon/membership.h"
#include "daemon/metrics_server.h"
#include "daemon/node.h"
#include "daemon/node_job.h"
#include "daemon/outputs.h"
#include "daemon/scheduler_env.h"
#include "net/transport.h"
#include "sgd/backend.h"
#include "sgd/problem.h"
#include "topology/topology_file.h"

namespace gossip::daemon {
namespace {

std::atomic<bool> g_stop{false};

void on_signal(int) { g_stop.store(true); }

int usage_error(const Status& s) {
  // A config with several errors lists one per line: each line is escaped on its own and the
  // continuation lines indented, so no line can be made to look like the start of another.
  const std::string message = s.to_string();
  std::string text;
  std::string_view rest = message;
  for (bool first = true; first || !rest.empty(); first = false) {
    const std::size_t nl = rest.find('\n');
    text += (first ? "" : "\n  ") + log_escape(rest.substr(0, nl));
    rest = nl == std::string_view::npos ? std::string_view() : rest.substr(nl + 1);
  }
  std::fprintf(stderr, "gossipd run: %s\n", text.c_str());
  return kExitUsage;
}

// A phase that ends the run: the exit code, and what to say (nothing when already logged).
struct Exit {
  int code = kExitError;
};

// What the command line names, loaded and checked (phase 1).
struct Inputs {
  TrainConfig config;
  topology::Topology topology;
  bool attach = false;
  RunOutputs outputs;                    // this node's checkpoint directory, metrics, parameters
  std::shared_ptr<DirectoryLock> owned;  // held for the whole run (daemon/dir_lock.h)
};

// The topology: the file TOPOLOGY names, or under --from-env the one generated from the config's
// `topology` block on the hosts the scheduler gave (`start`).
Result<topology::Topology> load_topology_for(const RunOptions& o, const TrainConfig& config,
                                             const SchedulerStart* start) {
  if (start == nullptr) return topology::load_topology(o.topology_path);
  if (!config.has_topology()) {
    return invalid_argument(o.config_path +
                            ": --from-env needs the training config's topology block, e.g. "
                            "topology { generator: \"one_peer_exponential\" base_port: 7100 }");
  }
  GOSSIP_ASSIGN_OR_RETURN(topology::Topology t,
                          generated_topology(config.topology(), *start, o.config_path));
  GOSSIP_LOG(kInfo) << start->describe << "; topology " << t.name() << " ("
                    << config.topology().generator() << ", " << t.num_nodes()
                    << " nodes), fingerprint " << t.fingerprint();
  return t;
}

// fault.standby_nodes against the topology: nodes of it, and a symmetric W (carry-on drops them
// from W until they join).
Status check_standby(const RunOptions& o, const TrainConfig& config,
                     const topology::Topology& topo) {
  if (config.fault().standby_nodes().empty()) return Status::ok();
  GOSSIP_ASSIGN_OR_RETURN(std::string text, Env::system().read_file(o.config_path));
  GOSSIP_RETURN_IF_ERROR(config::validate_against_topology(config, topo.num_nodes(), o.config_path,
                                                           text, o.overrides));
  if (!mixing_is_symmetric(topo)) {
    return invalid_argument(o.config_path +
                            ": fault.standby_nodes: needs a symmetric W(t) (an "
                            "undirected topology) for the carry-on protocol; " +
                            o.topology_path + " is directed");
  }
  return Status::ok();
}

Result<Inputs> load_inputs(const RunOptions& o, const SchedulerStart* start) {
  Inputs in;
  GOSSIP_ASSIGN_OR_RETURN(
      in.config, config::load_config_with_overrides(o.config_path, o.overrides, Env::system(),
                                                    o.attach_socket.empty()
                                                        ? config::ConfigUse::kOwnTrainer
                                                        : config::ConfigUse::kAttachedTrainer));
  if (o.print_config) std::fputs(config::to_text(in.config).c_str(), stdout);
  GOSSIP_ASSIGN_OR_RETURN(in.topology, load_topology_for(o, in.config, start));
  const topology::Topology& topo = in.topology;
  if (o.node_id < 0 || o.node_id >= topo.num_nodes()) {
    return invalid_argument("--node " + std::to_string(o.node_id) + ": " + o.topology_path +
                            " has nodes 0.." + std::to_string(topo.num_nodes() - 1));
  }
  if (topo.addresses().empty()) {
    return invalid_argument(o.topology_path + ": nodes have no addresses");
  }
  GOSSIP_RETURN_IF_ERROR(check_standby(o, in.config, topo));
  if (!o.insecure && o.certs_dir.empty()) {
    return invalid_argument("give --certs DIR (TLS, made by scripts/gen-certs.sh) or --insecure");
  }
  in.attach = !o.attach_socket.empty();
  // Before any trainer, data or neighbour: this run owns its checkpoint directory until it exits,
  // a fresh run finds no earlier checkpoints there, and every output can be written
  // (daemon/outputs.h; open_node_start checks the directory again).
  in.outputs = run_outputs(in.config, o.node_id, o.metrics_path, o.dump_params_dir);
  GOSSIP_ASSIGN_OR_RETURN(in.owned,
                          claim_outputs(in.outputs, !o.resume && !o.resume_or_start && !o.resume_at,
                                        "gossipd run, node " + std::to_string(o.node_id)));
  return in;
}

// Attach mode (phase 2): the trainer says how many parameters it gossips before anything else
// happens, so that the Hello to the neighbours carries that count (a mismatch is refused there).
Result<std::unique_ptr<attach::AttachServer>> accept_trainer(const RunOptions& o, const Inputs& in,
                                                             std::uint64_t* num_params,
                                                             Exit* exit) {
  Result<std::unique_ptr<attach::AttachServer>> server =
      attach::AttachServer::listen(o.attach_socket);
  if (!server.is_ok()) {
    exit->code = kExitUsage;
    return server.status().with_context("--attach");
  }
  GOSSIP_LOG(kInfo) << "waiting up to timeouts.connect_ms=" << in.config.timeouts().connect_ms()
                    << " ms for a trainer on " << log_escape(o.attach_socket);
  attach::AttachOptions ao;
  ao.node_id = static_cast<std::uint32_t>(o.node_id);
  ao.num_nodes = static_cast<std::uint32_t>(in.topology.num_nodes());
  ao.local_steps = in.config.local_steps();
  Result<std::uint64_t> n =
      (*server)->accept_hello(std::chrono::steady_clock::now() +
                                  std::chrono::milliseconds(in.config.timeouts().connect_ms()),
                              ao);
  if (!n.is_ok()) {
    exit->code = n.status().code() == StatusCode::kInvalidArgument ? kExitUsage : kExitTrainerGone;
    return n.status().with_context("attached trainer");
  }
  *num_params = *n;
  GOSSIP_LOG(kInfo) << "trainer attached: " << *n << " float32 parameters"
                    << ((*server)->with_update() ? " (update session)" : "");
  return std::move(*server);
}

// Before anything is allocated or any neighbour is contacted: the float32 buffers the node
// allocates (x, x_{t+1}, gradient, direction, optimizer state, one receive buffer per
// in-neighbour, a staging and a checkpoint copy) must fit.
Status check_fits(const RunOptions& o, const Inputs& in, std::uint64_t d, const std::string& what) {
  const std::uint64_t in_neighbours = all_neighbours(in.topology, o.node_id).size();
  const std::uint64_t buffers = 8 + in_neighbours;
  const std::uint64_t bytes =
      d > (~std::uint64_t{0}) / 4 / buffers ? ~std::uint64_t{0} : d * 4 * buffers;
  Status fits = check_memory(
      bytes, o.memory_cap,
      what + " (" + std::to_string(d) + " parameters, " + std::to_string(buffers) + " buffers)");
  return fits.with_context(o.memory_cap ? "--memory-cap" : "model");
}

// The node's job (phase 3): gossipd's own model on its shard, or the attached trainer.
struct Job {
  sgd::Problem problem;  // empty for an attached trainer
  std::unique_ptr<sgd::Backend> backend;
  NodeJob job;
};

Result<Job> make_job(const RunOptions& o, const Inputs& in,
                     std::unique_ptr<attach::AttachServer> trainer, std::uint64_t attached) {
  Job j;
  const TrainConfig& config = in.config;
  if (!in.attach) {
    GOSSIP_ASSIGN_OR_RETURN(
        j.problem, sgd::make_problem(config::to_problem_config(config, in.topology.num_nodes())));
  }
  const std::uint64_t d = in.attach ? attached : j.problem.spec.num_params();
  GOSSIP_RETURN_IF_ERROR(check_fits(
      o, in, d,
      in.attach ? std::string("attached trainer's model") : "model " + j.problem.spec.to_string()));
  // An attached trainer's parameters are mixed in host memory (its shared buffer).
  Result<sgd::Device> device =
      sgd::parse_device(config.device() == config::pb::TrainConfig::CPU    ? "cpu"
                        : config.device() == config::pb::TrainConfig::CUDA ? "cuda"
                                                                           : "auto");
  Result<std::unique_ptr<sgd::Backend>> backend = sgd::make_backend(
      in.attach ? sgd::Device::kCpu : *device, static_cast<int>(config.cpu_threads()));
  if (!backend.is_ok()) return backend.status().with_context("device");
  j.backend = std::move(*backend);
  if (in.attach) {
    j.job.step = std::make_unique<AttachStep>(
        std::move(trainer), std::chrono::milliseconds(config.timeouts().deadline_ms()));
    j.job.num_params = attached;
    j.job.total_iterations = config.iterations();
    return j;
  }
  GOSSIP_LOG(kInfo) << "model " << j.problem.spec.to_string() << " (" << d
                    << " parameters), shard of " << j.problem.shards[o.node_id].size()
                    << " examples, backend " << j.backend->description();
  GOSSIP_ASSIGN_OR_RETURN(
      j.job, make_sgd_job(config, j.problem, *j.backend, o.node_id, in.topology.num_nodes()));
  return j;
}

NodeOptions node_options(const RunOptions& o, const Inputs& in,
                         std::shared_ptr<LiveMetrics> live = nullptr) {
  NodeOptions n;
  n.live_metrics = std::move(live);
  n.node_id = o.node_id;
  n.config = in.config;
  n.checkpoint_dir = in.outputs.checkpoint_dir;
  n.metrics_path = in.outputs.metrics_path;  // its directory made by claim_outputs
  n.resume = o.resume;
  n.resume_or_start = o.resume_or_start;
  n.resume_at = o.resume_at;
  n.dump_params_dir = o.dump_params_dir;
  return n;
}

// The transport's options (phase 4): this node's address and Hello, its links, TLS, timeouts.
Result<net::TransportOptions> transport_options(const RunOptions& o, const Inputs& in,
                                                const daemon::AlgorithmFactory& algorithm,
                                                std::uint64_t num_params) {
  const TrainConfig& config = in.config;
  const topology::Topology& topo = in.topology;
  const int self = o.node_id;
  net::TransportOptions t;
  t.self.job_id = job_id_for(config, topo);
  t.self.node_id = self;
  t.self.topology_fingerprint = topology_fingerprint64(topo);
  t.self.param_count = algorithm.message_floats(num_params);
  t.self.algorithm = algorithm.hello_name();
  const topology::NodeAddress& me = topo.addresses()[self];
  t.listen_host = o.listen_host.empty() ? me.host : o.listen_host;
  t.listen_port = static_cast<std::uint16_t>(me.port);
  for (int j : algorithm.link_peers()) {
    const topology::NodeAddress& a = topo.addresses()[j];
    t.neighbours.push_back({j, a.host, static_cast<std::uint16_t>(a.port)});
  }
  t.insecure = o.insecure;
  if (!o.insecure) {
    std::string base = o.certs_dir + "/node-" + std::to_string(self);
    t.tls = {o.certs_dir + "/ca.pem", base + ".pem", base + ".key"};
  }
  t.heartbeat_interval_ms = config.timeouts().heartbeat_ms();
  t.peer_timeout_ms =
      std::max<std::int64_t>(config.timeouts().deadline_ms(), 2 * t.heartbeat_interval_ms + 1);
  t.handshake_timeout_ms = std::min<std::int64_t>(5000, config.timeouts().connect_ms());
  t.degree = static_cast<std::uint32_t>(topo.in_neighbors(self, 0).size());
  if (algorithm.renumbers_links()) t.initial_floor = UINT64_MAX;
  if (config.link().has_notsent_lowat_bytes()) {
    t.notsent_lowat_bytes = config.link().notsent_lowat_bytes();
  }
  const std::string& cc = config.link().has_congestion_control()
                              ? config.link().congestion_control()
                              : std::string("auto");
  Result<net::CongestionChoice> choice = net::choose_congestion_control(cc);
  if (!choice.is_ok())
    return choice.status().with_context("training config: link.congestion_control");
  t.congestion_control = choice->name;
  GOSSIP_LOG(kInfo) << "links: TCP congestion control " << choice->reason;
  return t;
}

// Waits for the links (phase 5). Returns the exit code when the run cannot start; `step` (may be
// null) is told why.
std::optional<int> wait_for_links(const RunOptions& o, const Inputs& in, net::Transport& transport,
                                  const daemon::AlgorithmFactory& algorithm, LocalStep* step) {
  // Standby nodes (fault.standby_nodes) start absent: nobody waits for them.
  std::vector<int> peers = algorithm.link_peers();
  for (std::uint32_t s : in.config.fault().standby_nodes()) std::erase(peers, static_cast<int>(s));
  const auto connect_ms = in.config.timeouts().connect_ms();
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(connect_ms);
  bool connected = false;
  std::optional<Status> mismatch;
  while (!connected && !g_stop.load() && std::chrono::steady_clock::now() < deadline &&
         !(mismatch = transport.config_mismatch())) {
    // Short slices so that SIGTERM is honoured while neighbours are still starting.
    connected = transport.wait_connected(
        peers,
        std::min(deadline, std::chrono::steady_clock::now() + std::chrono::milliseconds(100)));
  }
  if (mismatch) {
    // Carrying on without such a neighbour would train a different job than the user asked for.
    GOSSIP_LOG(kError) << "a neighbour runs another configuration: " << mismatch->to_string();
    if (step) step->finish("a neighbour runs another configuration: " + mismatch->message());
    return kExitUsage;
  }
  if (connected) {
    GOSSIP_LOG(kInfo) << "connected to " << peers.size() << " neighbours"
                      << (o.insecure ? " (INSECURE: plaintext)" : " (TLS 1.3)");
    return std::nullopt;
  }
  if (g_stop.load()) {
    GOSSIP_LOG(kInfo) << "stop requested (signal) while waiting for the neighbours to connect; "
                         "nothing was trained, no checkpoint written";
    return kExitStopped;
  }
  const std::vector<int> up = transport.connected_peers();
  if (algorithm.may_start_without_every_link()) {
    // Carry-on: start with whoever is there; the others are dropped in the first iteration's
    // verdict phase and re-admitted when they connect.
    GOSSIP_LOG(kWarning) << "only " << up.size() << " of " << peers.size()
                         << " neighbours connected within timeouts.connect_ms=" << connect_ms
                         << "; starting anyway (fault.policy CARRY_ON); not connected: "
                         << transport.describe_unconnected(peers);
    return std::nullopt;
  }
  std::string missing;
  for (int j : peers) {
    if (std::find(up.begin(), up.end(), j) == up.end()) {
      missing += ' ';  // (not " " + to_string: GCC 12 reports a false -Wrestrict there)
      missing += std::to_string(j);
    }
  }
  GOSSIP_LOG(kError) << "neighbours not connected within timeouts.connect_ms=" << connect_ms << ":"
                     << missing;
  if (step) step->finish("gossipd: neighbours not connected:" + missing);
  return kExitNeighbourFailed;
}

// Phases 5 and 6: the links, the algorithm, the driver. `transport` is shut down by the caller.
int train(const RunOptions& o, const Inputs& in, Job& j, NodeStart& start,
          daemon::AlgorithmFactory& factory, net::Transport& transport,
          std::shared_ptr<LiveMetrics> live) {
  install_stop_handlers();
  if (std::optional<int> code = wait_for_links(o, in, transport, factory, j.job.step.get())) {
    return *code;
  }
  // Gloo writes to its sockets without MSG_NOSIGNAL: a peer that died would otherwise kill this
  // process with SIGPIPE instead of failing its operation (exit 3, checkpoint written).
  ::signal(SIGPIPE, SIG_IGN);
  Result<std::unique_ptr<daemon::Algorithm>> algorithm = factory.connect(g_stop);
  if (!algorithm.is_ok()) {
    GOSSIP_LOG(kError) << algorithm.status().to_string();
    j.job.step->finish(algorithm.status().to_string());
    return g_stop.load() ? kExitStopped : kExitNeighbourFailed;
  }
  const NodeOptions n = node_options(o, in, std::move(live));
  return drive_node(n, j.job, start, *j.backend, **algorithm, factory.senders(), g_stop).exit_code;
}

// --metrics-listen (phase 1, before the trainer and the neighbours: a taken port is a usage error
// at once, and probes find the node while it waits for them). Null server without the flag.
Result<std::unique_ptr<MetricsServer>> serve_metrics(const RunOptions& o,
                                                     const std::shared_ptr<LiveMetrics>& live) {
  if (o.metrics_listen.empty()) return std::unique_ptr<MetricsServer>();
  Result<ListenAddress> address = parse_listen_address(o.metrics_listen);
  if (!address.is_ok()) return address.status().with_context("--metrics-listen");
  MetricsSnapshot first;
  first.node = o.node_id;
  first.loss = std::numeric_limits<double>::quiet_NaN();
  live->publish(first);
  Result<std::unique_ptr<MetricsServer>> server = MetricsServer::start(*address, live);
  if (!server.is_ok()) return server.status().with_context("--metrics-listen");
  GOSSIP_LOG(kInfo) << "serving metrics on http://" << log_escape(o.metrics_listen) << "/metrics";
  return server;
}

}  // namespace

void install_signal_handler(void (*handler)(int)) {
  struct sigaction sa = {};
  sa.sa_handler = handler;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGINT, &sa, nullptr);
}

void install_stop_handlers() { install_signal_handler(on_signal); }

std::string job_id_for(const config::TrainConfig& config, const topology::Topology& topology) {
  std::string job = !config.job_id().empty()
                        ? config.job_id()
                        : (!topology.name().empty() ? topology.name() : "gossip");
  for (char& ch : job) {
    if (!std::isalnum(static_cast<unsigned char>(ch)) && ch != '.' && ch != '_' && ch != '-')
      ch = '_';
  }
  return job.substr(0, 64);
}

int run_command(const RunOptions& options) {
  // 0. Under --from-env, the scheduler says which node this is and where every node runs.
  RunOptions o = options;
  std::optional<SchedulerStart> scheduler;
  if (o.from_env) {
    Result<SchedulerStart> s = scheduler_start(SchedulerEnv::system());
    if (!s.is_ok()) return usage_error(s.status());
    scheduler = std::move(*s);
    o.node_id = scheduler->node_id;
    // The host name a node list gives may resolve to a loopback address on the host itself
    // (Debian's /etc/hosts maps its own name to 127.0.1.1) and a pod's name only once the pod is
    // up: listening on every interface is reachable under either.
    if (o.listen_host.empty()) o.listen_host = "0.0.0.0";
  }
  set_log_prefix("node " + std::to_string(o.node_id));
  // 1. Inputs: config, topology, flags.
  Result<Inputs> inputs = load_inputs(o, scheduler ? &*scheduler : nullptr);
  if (!inputs.is_ok()) return usage_error(inputs.status());
  const Inputs& in = *inputs;
  auto live = o.metrics_listen.empty() ? nullptr : std::make_shared<LiveMetrics>();
  Result<std::unique_ptr<MetricsServer>> metrics_server = serve_metrics(o, live);
  if (!metrics_server.is_ok()) return usage_error(metrics_server.status());
  // 2. The attached trainer, if any.
  std::unique_ptr<attach::AttachServer> trainer;
  std::uint64_t attached = 0;
  if (in.attach) {
    Exit exit;
    Result<std::unique_ptr<attach::AttachServer>> t = accept_trainer(o, in, &attached, &exit);
    if (!t.is_ok()) {
      GOSSIP_LOG(kError) << t.status().to_string();
      return exit.code;
    }
    trainer = std::move(*t);
  }
  // 3. The job: data, backend, the local step.
  Result<Job> job = make_job(o, in, std::move(trainer), attached);
  if (!job.is_ok()) return usage_error(job.status());
  algorithms::FactoryOptions fo{o.node_id,
                                o.insecure,
                                job->job.num_params,
                                job->backend.get(),
                                in.attach,
                                in.attach && job->job.step->has_update(),
                                in.outputs.checkpoint_dir};
  Result<std::unique_ptr<daemon::AlgorithmFactory>> factory =
      algorithms::make_algorithm_factory(in.config, in.topology, fo, g_stop);
  if (!factory.is_ok()) {
    if (job->job.step) job->job.step->finish(factory.status().to_string());
    return usage_error(factory.status());
  }
  // 4. Where the run starts: a run that cannot start (nothing usable to resume) is refused here,
  // before any neighbour is contacted.
  int code = kExitError;
  Result<NodeStart> start =
      open_node_start(node_options(o, in), in.topology, job->job, &code, (*factory)->state_size());
  if (!start.is_ok()) {
    GOSSIP_LOG(kError) << start.status().to_string();
    job->job.step->finish(start.status().to_string());
    return code;
  }
  // 5. The transport, its control messages to the algorithm from the start.
  Result<net::TransportOptions> topts = transport_options(o, in, **factory, job->job.num_params);
  if (!topts.is_ok()) return usage_error(topts.status());
  Result<std::unique_ptr<net::Transport>> transport = net::Transport::start(*topts);
  if (!transport.is_ok()) {
    GOSSIP_LOG(kError) << transport.status().to_string();
    const StatusCode c = transport.status().code();
    return c == StatusCode::kInvalidArgument || c == StatusCode::kNotFound ||
                   c == StatusCode::kPermissionDenied
               ? kExitUsage
               : kExitError;
  }
  (*factory)->on_transport(**transport);
  GOSSIP_LOG(kInfo) << "listening on " << topts->listen_host << ":" << topts->listen_port;
  // 6. Train.
  const int exit_code = train(o, in, *job, *start, **factory, **transport, live);
  // After a normal end our last iteration's data may still sit in the kernel's queues on its way
  // to neighbours that are finishing theirs: seconds of it on a slow link (2.8 MB per host on the
  // exponential graph at 10 Mbit/s). Closing after the default 1 s reset such links (unread
  // heartbeats make close() send RST, which discards the unsent data) and failed the neighbour's
  // last iteration with exit 3. A neighbour needs it within one deadline, so wait up to that.
  (*transport)->shutdown(exit_code == kExitOk ? in.config.timeouts().deadline_ms() : 1000);
  return exit_code;
}

}  // namespace gossip::daemon
