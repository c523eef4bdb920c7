// gossipd run. The order of the steps is chosen so that every user error (flags, config, topology)
// is reported before any data is loaded or any socket is opened.
#include "daemon/run.h"

#include <signal.h>

#include <algorithm>
#include <chrono>
#include <cstdio>

#include "common/escape.h"
#include "common/log.h"
#include "common/memory.h"
#if GOSSIP_HAVE_GLOO
#include "daemon/allreduce.h"
#endif
#include "attach/server.h"
#include "config/load.h"
#include "daemon/attach_step.h"
#include "daemon/checkpoint.h"
#include "daemon/exchange.h"
#include "daemon/exit_codes.h"
#include "daemon/node.h"
#include "daemon/node_job.h"
#include "daemon/outputs.h"
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

}  // namespace

void install_stop_handlers() {
  struct sigaction sa = {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGINT, &sa, nullptr);
}

std::string job_id_for(const TrainConfig& config, const topology::Topology& topology) {
  std::string job = !config.job_id().empty()
                        ? config.job_id()
                        : (!topology.name().empty() ? topology.name() : "gossip");
  for (char& ch : job) {
    if (!std::isalnum(static_cast<unsigned char>(ch)) && ch != '.' && ch != '_' && ch != '-')
      ch = '_';
  }
  return job.substr(0, 64);
}

int run_command(const RunOptions& o) {
  set_log_prefix("node " + std::to_string(o.node_id));
  Result<TrainConfig> config_or = config::load_config_with_overrides(
      o.config_path, o.overrides, Env::system(),
      o.attach_socket.empty() ? config::ConfigUse::kOwnTrainer
                              : config::ConfigUse::kAttachedTrainer);
  if (!config_or.is_ok()) return usage_error(config_or.status());
  TrainConfig config = *config_or;
  if (o.print_config) std::fputs(config::to_text(config).c_str(), stdout);
  Result<topology::Topology> topo_or = topology::load_topology(o.topology_path);
  if (!topo_or.is_ok()) return usage_error(topo_or.status());
  const topology::Topology& topo = *topo_or;
  if (o.node_id < 0 || o.node_id >= topo.num_nodes()) {
    return usage_error(invalid_argument("--node " + std::to_string(o.node_id) + ": " +
                                        o.topology_path + " has nodes 0.." +
                                        std::to_string(topo.num_nodes() - 1)));
  }
  if (topo.addresses().empty()) {
    return usage_error(invalid_argument(o.topology_path + ": nodes have no addresses"));
  }
  if (!o.insecure && o.certs_dir.empty()) {
    return usage_error(
        invalid_argument("give --certs DIR (TLS, made by scripts/gen-certs.sh) or --insecure"));
  }
  const bool allreduce = config.algorithm() == config::pb::TrainConfig::ALLREDUCE;
  if (allreduce && !o.insecure) {
    return usage_error(invalid_argument(
        "algorithm ALLREDUCE needs --insecure: Debian's Gloo has no TLS transport, so its gradient "
        "traffic is plaintext"));
  }
#if !GOSSIP_HAVE_GLOO
  if (allreduce) {
    return usage_error(invalid_argument(
        "algorithm ALLREDUCE: this gossipd was built without Gloo (cmake -DGOSSIP_GLOO=OFF, as the "
        "aarch64 cross build is); build it with libgloo-dev installed"));
  }
#endif
  if (allreduce && (o.resume || o.resume_at)) {
    return usage_error(invalid_argument("--resume: not supported with algorithm ALLREDUCE"));
  }
  const bool attach = !o.attach_socket.empty();
  if (attach && allreduce) {
    return usage_error(invalid_argument(
        "--attach: an attached trainer gossips its parameters (algorithm DPSGD); ALLREDUCE "
        "averages gossipd's own gradients"));
  }

  Result<sgd::Device> device =
      sgd::parse_device(config.device() == config::pb::TrainConfig::CPU    ? "cpu"
                        : config.device() == config::pb::TrainConfig::CUDA ? "cuda"
                                                                           : "auto");

  // Before any trainer, data or neighbour: this run owns its checkpoint directory until it exits,
  // a fresh run finds no earlier checkpoints there, and every output can be written
  // (daemon/outputs.h; open_node_start checks the directory again).
  const RunOutputs outputs = run_outputs(config, o.node_id, o.metrics_path, o.dump_params_dir);
  const std::string& checkpoint_dir = outputs.checkpoint_dir;
  Result<std::shared_ptr<DirectoryLock>> owned =
      claim_outputs(outputs, !o.resume && !o.resume_or_start && !o.resume_at,
                    "gossipd run, node " + std::to_string(o.node_id));
  if (!owned.is_ok()) return usage_error(owned.status());

  // Attach mode: the trainer says how many parameters it gossips before anything else happens, so
  // that the Hello to the neighbours carries that count (a mismatch is refused there).
  std::unique_ptr<attach::AttachServer> attached;
  std::uint64_t attached_params = 0;
  if (attach) {
    Result<std::unique_ptr<attach::AttachServer>> server =
        attach::AttachServer::listen(o.attach_socket);
    if (!server.is_ok()) return usage_error(server.status().with_context("--attach"));
    GOSSIP_LOG(kInfo) << "waiting up to timeouts.connect_ms=" << config.timeouts().connect_ms()
                      << " ms for a trainer on " << log_escape(o.attach_socket);
    attach::AttachOptions ao;
    ao.node_id = static_cast<std::uint32_t>(o.node_id);
    ao.num_nodes = static_cast<std::uint32_t>(topo.num_nodes());
    Result<std::uint64_t> n =
        (*server)->accept_hello(std::chrono::steady_clock::now() +
                                    std::chrono::milliseconds(config.timeouts().connect_ms()),
                                ao);
    if (!n.is_ok()) {
      GOSSIP_LOG(kError) << "attached trainer: " << n.status().to_string();
      return n.status().code() == StatusCode::kInvalidArgument ? kExitUsage : kExitTrainerGone;
    }
    attached = std::move(*server);
    attached_params = *n;
    GOSSIP_LOG(kInfo) << "trainer attached: " << attached_params << " float32 parameters"
                      << (attached->with_update() ? " (update session)" : "");
  }

  // Data and backend.
  Result<sgd::Problem> problem =
      attach ? Result<sgd::Problem>(sgd::Problem())
             : sgd::make_problem(config::to_problem_config(config, topo.num_nodes()));
  if (!problem.is_ok()) return usage_error(problem.status());
  {
    // Before anything is allocated or any neighbour is contacted: the float32 buffers run_node
    // allocates (x, x_{t+1}, gradient, direction, optimizer state, one receive buffer per
    // in-neighbour, a staging and a checkpoint copy) must fit.
    const std::uint64_t d = attach ? attached_params : problem->spec.num_params();
    const std::uint64_t in_neighbours = all_neighbours(topo, o.node_id).size();
    const std::uint64_t buffers = 8 + in_neighbours;
    const std::uint64_t bytes =
        d > (~std::uint64_t{0}) / 4 / buffers ? ~std::uint64_t{0} : d * 4 * buffers;
    Status fits = check_memory(
        bytes, o.memory_cap,
        (attach ? std::string("attached trainer's model") : "model " + problem->spec.to_string()) +
            " (" + std::to_string(d) + " parameters, " + std::to_string(buffers) + " buffers)");
    if (!fits.is_ok()) {
      return usage_error(fits.with_context(o.memory_cap ? "--memory-cap" : "model"));
    }
  }
  // An attached trainer's parameters are mixed in host memory (its shared buffer).
  Result<std::unique_ptr<sgd::Backend>> backend = sgd::make_backend(
      attach ? sgd::Device::kCpu : *device, static_cast<int>(config.cpu_threads()));
  if (!backend.is_ok()) return usage_error(backend.status().with_context("device"));
  if (!attach) {
    GOSSIP_LOG(kInfo) << "model " << problem->spec.to_string() << " (" << problem->spec.num_params()
                      << " parameters), shard of " << problem->shards[o.node_id].size()
                      << " examples, backend " << (*backend)->description();
  }

  // The job and where it starts: a run that cannot start (nothing usable to resume) is refused
  // here, before any neighbour is contacted.
  NodeOptions n;
  n.node_id = o.node_id;
  n.config = config;
  n.checkpoint_dir = checkpoint_dir;
  n.metrics_path = outputs.metrics_path;  // its directory made by claim_outputs
  n.resume = o.resume;
  n.resume_or_start = o.resume_or_start;
  n.resume_at = o.resume_at;
  n.dump_params_dir = o.dump_params_dir;
  NodeJob job;
  std::optional<NodeStart> node_start;
  if (attach) {
    job.step = std::make_unique<AttachStep>(
        std::move(attached), std::chrono::milliseconds(config.timeouts().deadline_ms()));
    job.num_params = attached_params;
    job.total_iterations = config.iterations();
  } else if (!allreduce) {
    Result<NodeJob> sgd_job =
        make_sgd_job(config, *problem, **backend, o.node_id, topo.num_nodes());
    if (!sgd_job.is_ok()) return usage_error(sgd_job.status());
    job = std::move(*sgd_job);
  }
  if (job.step) {
    int code = kExitError;
    Result<NodeStart> opened = open_node_start(n, topo, job, &code);
    if (!opened.is_ok()) {
      GOSSIP_LOG(kError) << opened.status().to_string();
      job.step->finish(opened.status().to_string());
      return code;
    }
    node_start.emplace(std::move(*opened));
  }

  // Transport.
  const int self = o.node_id;
  net::TransportOptions t;
  t.self.job_id = job_id_for(config, topo);
  t.self.node_id = self;
  t.self.topology_fingerprint = topology_fingerprint64(topo);
  t.self.param_count = attach ? attached_params : problem->spec.num_params();
  t.self.algorithm = allreduce ? "allreduce" : "";
  const topology::NodeAddress& me = topo.addresses()[self];
  t.listen_host = o.listen_host.empty() ? me.host : o.listen_host;
  t.listen_port = static_cast<std::uint16_t>(me.port);
  // ALLREDUCE: our links only carry Gloo's rendezvous, a star around node 0 (daemon/allreduce.h).
#if GOSSIP_HAVE_GLOO
  std::vector<int> peers =
      allreduce ? star_peers(topo.num_nodes(), self) : all_neighbours(topo, self);
#else
  std::vector<int> peers = all_neighbours(topo, self);
#endif
  for (int j : peers) {
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
  if (config.link().has_notsent_lowat_bytes()) {
    t.notsent_lowat_bytes = config.link().notsent_lowat_bytes();
  }
  t.congestion_control = config.link().congestion_control();
  if (!t.congestion_control.empty()) {
    if (Status s = net::check_congestion_control(t.congestion_control); !s.is_ok()) {
      return usage_error(s.with_context("training config: link.congestion_control"));
    }
  }
#if GOSSIP_HAVE_GLOO
  TransportStore store(self, g_stop, std::chrono::milliseconds(config.timeouts().connect_ms()));
#endif
  Result<std::unique_ptr<net::Transport>> transport = net::Transport::start(t);
  if (!transport.is_ok()) {
    GOSSIP_LOG(kError) << transport.status().to_string();
    return transport.status().code() == StatusCode::kInvalidArgument ||
                   transport.status().code() == StatusCode::kNotFound ||
                   transport.status().code() == StatusCode::kPermissionDenied
               ? kExitUsage
               : kExitError;
  }
  // Control messages go to their consumer from here on (the transport holds what arrives before):
  // the rendezvous store under ALLREDUCE, otherwise the exchange's membership mailbox.
  std::unique_ptr<ParameterExchange> exchange;
#if GOSSIP_HAVE_GLOO
  if (allreduce) {
    (*transport)->set_control_handler([&store](int peer, std::string_view c) {
      return store.on_control(peer, c);
    });
  }
#endif
  if (!allreduce) exchange = make_transport_exchange(**transport);
  GOSSIP_LOG(kInfo) << "listening on " << t.listen_host << ":" << t.listen_port;
  install_stop_handlers();
  auto connect_deadline =
      std::chrono::steady_clock::now() + std::chrono::milliseconds(config.timeouts().connect_ms());
  bool connected = false;
  std::optional<Status> mismatch;
  while (!connected && !g_stop.load() && std::chrono::steady_clock::now() < connect_deadline &&
         !(mismatch = (*transport)->config_mismatch())) {
    // Short slices so that SIGTERM is honoured while neighbours are still starting.
    connected =
        (*transport)
            ->wait_connected(peers, std::min(connect_deadline, std::chrono::steady_clock::now() +
                                                                   std::chrono::milliseconds(100)));
  }
  // ALLREDUCE needs every node: it never starts without one.
  if (mismatch) {
    // Carrying on without such a neighbour would train a different job than the user asked for.
    GOSSIP_LOG(kError) << "a neighbour runs another configuration: " << mismatch->to_string();
    if (job.step)
      job.step->finish("a neighbour runs another configuration: " + mismatch->message());
    (*transport)->shutdown();
    return kExitUsage;
  }
  const bool carry_on = !allreduce && config.fault().policy() != config::pb::Fault::FAIL_STOP;
  if (!connected && !g_stop.load() && carry_on) {
    // Carry-on: start with whoever is there; the others are dropped in the first iteration's
    // verdict phase and re-admitted when they connect.
    std::vector<int> up = (*transport)->connected_peers();
    GOSSIP_LOG(kWarning) << "only " << up.size() << " of " << peers.size()
                         << " neighbours connected within timeouts.connect_ms="
                         << config.timeouts().connect_ms()
                         << "; starting anyway (fault.policy CARRY_ON)";
    connected = true;
  } else if (connected) {
    GOSSIP_LOG(kInfo) << "connected to " << peers.size() << " neighbours"
                      << (o.insecure ? " (INSECURE: plaintext)" : " (TLS 1.3)");
  }
  if (!connected && g_stop.load()) {
    GOSSIP_LOG(kInfo) << "stop requested (signal) while waiting for the neighbours to connect; "
                         "nothing was trained, no checkpoint written";
    (*transport)->shutdown();
    return kExitStopped;
  }
  if (!connected) {
    std::vector<int> up = (*transport)->connected_peers();
    std::string missing;
    for (int j : peers) {
      if (std::find(up.begin(), up.end(), j) == up.end()) {
        missing += ' ';  // (not " " + to_string: GCC 12 reports a false -Wrestrict there)
        missing += std::to_string(j);
      }
    }
    GOSSIP_LOG(kError) << "neighbours not connected within timeouts.connect_ms="
                       << config.timeouts().connect_ms() << ":" << missing;
    if (job.step) job.step->finish("gossipd: neighbours not connected:" + missing);
    (*transport)->shutdown();
    return kExitNeighbourFailed;
  }

  NodeResult r;
#if GOSSIP_HAVE_GLOO
  if (allreduce) {
    // Gloo writes to its sockets without MSG_NOSIGNAL: a peer that died would otherwise kill this
    // process with SIGPIPE instead of failing the allreduce (exit 3, checkpoint written).
    ::signal(SIGPIPE, SIG_IGN);
    store.attach(transport->get(), peers);
    Result<std::shared_ptr<gloo::Context>> gloo =
        connect_gloo(self, topo.num_nodes(), me.host, store,
                     std::chrono::milliseconds(config.timeouts().connect_ms()),
                     std::chrono::milliseconds(config.timeouts().deadline_ms()));
    if (!gloo.is_ok()) {
      GOSSIP_LOG(kError) << gloo.status().to_string();
      (*transport)->shutdown();
      return g_stop.load() ? kExitStopped : kExitNeighbourFailed;
    }
    GOSSIP_LOG(kInfo) << "Gloo connected " << topo.num_nodes() << " nodes (ALLREDUCE, plaintext)";
    r = run_allreduce(n, topo, *problem, **backend, *gloo, g_stop);
    (*transport)->shutdown();
    return r.exit_code;
  }
#endif
  r = run_node(n, topo, job, *node_start, **backend, *exchange, g_stop);
  // After a normal end our last iteration's data may still sit in the kernel's queues on its way
  // to neighbours that are finishing theirs: seconds of it on a slow link (2.8 MB per host on the
  // exponential graph at 10 Mbit/s). Closing after the default 1 s reset such links (unread
  // heartbeats make close() send RST, which discards the unsent data) and failed the neighbour's
  // last iteration with exit 3. A neighbour needs it within one deadline, so wait up to that.
  (*transport)->shutdown(r.exit_code == 0 ? config.timeouts().deadline_ms() : 1000);
  return r.exit_code;
}

}  // namespace gossip::daemon
