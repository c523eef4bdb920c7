// make_algorithm_factory (see factory.h): one factory per algorithm. Gloo is optional at build
// time (CMake GOSSIP_GLOO), so ALLREDUCE's factory exists only where it is built.
#include "algorithms/factory.h"

#include <unistd.h>

#include <chrono>
#include <utility>

#include "algorithms/async_push_sum.h"
#include "algorithms/dpsgd.h"
#include "algorithms/local_gossip.h"
#include "algorithms/push_sum.h"
#include "common/log.h"
#include "config/sgd_config.h"
#include "daemon/algorithm.h"
#include "daemon/exchange.h"
#include "daemon/node.h"
#include "topology/push_sum.h"
#if GOSSIP_HAVE_GLOO
#include "algorithms/allreduce.h"
#include "algorithms/diloco.h"
#endif

namespace gossip::algorithms {
namespace {

// D-PSGD, per iteration (Dpsgd) or in rounds (LocalGossip); PUSH_SUM (PushSum) on the same links.
class DpsgdFactory final : public daemon::AlgorithmFactory {
 public:
  DpsgdFactory(const config::TrainConfig& config, const topology::Topology& topology,
               const FactoryOptions& options)
      : config_(config),
        topology_(topology),
        node_(options.node),
        options_(options),
        round_(config::to_round_config(config)),
        push_sum_(config.algorithm() == config::pb::TrainConfig::PUSH_SUM),
        async_(push_sum_ && config.staleness() > 0) {}

  std::vector<int> link_peers() const override { return daemon::all_neighbours(topology_, node_); }
  std::string hello_name() const override {
    return config::hello_algorithm(config_, options_.num_params);
  }
  bool may_start_without_every_link() const override {
    return config_.fault().policy() != config::pb::Fault::FAIL_STOP;
  }
  bool renumbers_links() const override {
    return async_ && config_.fault().policy() == config::pb::Fault::CARRY_ON;
  }
  std::vector<int> senders() const override {
    if (!round_.per_iteration() || async_)
      return {};  // LocalGossip and AsyncPushSum keep their own
    return Neighbourhood::senders(topology_, node_);
  }
  std::size_t state_size() const override {
    if (async_) return AsyncPushSum::state_floats(config_, topology_, node_);
    if (push_sum_) return PushSum::kStateFloats;
    if (round_.per_iteration()) return 0;
    return LocalGossip::state_floats(round_, topology_, node_, options_.num_params);
  }
  std::uint64_t message_floats(std::uint64_t num_params) const override {
    if (async_) return AsyncPushSum::message_floats(num_params);
    if (push_sum_) return PushSum::message_floats(num_params);
    return LocalGossip::message_floats(round_, num_params);
  }
  void on_transport(net::Transport& transport) override {
    // Asynchronous push-sum's control messages (acknowledgements, skip notices, link reports) go
    // to its own handler, the first one set, so that none that arrived early reaches the
    // membership mailbox (which would refuse it as a bad frame and close the link).
    exchange_ = daemon::make_transport_exchange(transport, /*take_control=*/!async_);
    if (async_) {
      transport_ = &transport;
      acks_ = std::make_shared<AsyncPushSum::Acks>(topology_.num_nodes());
      acks_->transport = &transport;
      transport.set_control_handler([acks = acks_](int peer, std::string_view c) {
        return AsyncPushSum::on_control(*acks, peer, c);
      });
    }
  }
  Result<std::unique_ptr<daemon::Algorithm>> connect(const std::atomic<bool>&) override {
    if (async_) {
      return std::unique_ptr<daemon::Algorithm>(
          std::make_unique<AsyncPushSum>(node_, config_, topology_, *exchange_, options_.num_params,
                                         options_.checkpoint_dir, *transport_, acks_));
    }
    if (push_sum_) {
      return std::unique_ptr<daemon::Algorithm>(
          std::make_unique<PushSum>(node_, config_, topology_, *exchange_));
    }
    if (round_.per_iteration()) {
      return std::unique_ptr<daemon::Algorithm>(
          std::make_unique<Dpsgd>(node_, config_, topology_, *exchange_));
    }
    return std::unique_ptr<daemon::Algorithm>(std::make_unique<LocalGossip>(
        node_, config_, topology_, *exchange_, options_.num_params, options_.attached));
  }

 private:
  const config::TrainConfig& config_;
  const topology::Topology& topology_;
  const int node_;
  const FactoryOptions options_;
  const sgd::RoundConfig round_;
  const bool push_sum_;
  const bool async_;  // PUSH_SUM with staleness ≥ 1
  std::unique_ptr<daemon::ParameterExchange> exchange_;
  net::Transport* transport_ = nullptr;
  std::shared_ptr<AsyncPushSum::Acks> acks_;
};

#if GOSSIP_HAVE_GLOO
// ALLREDUCE: the transport's links form a star around node 0 and carry only Gloo's rendezvous
// (allreduce.h); Gloo opens its own links once every node is there.
class AllreduceFactory final : public daemon::AlgorithmFactory {
 public:
  AllreduceFactory(const config::TrainConfig& config, const topology::Topology& topology,
                   const FactoryOptions& options, const std::atomic<bool>& stop)
      : config_(config),
        topology_(topology),
        options_(options),
        store_(options.node, stop, std::chrono::milliseconds(config.timeouts().connect_ms())) {}

  std::vector<int> link_peers() const override {
    return star_peers(topology_.num_nodes(), options_.node);
  }
  std::string hello_name() const override {
    return config::hello_algorithm(config_, options_.num_params);
  }
  bool may_start_without_every_link() const override { return false; }
  std::size_t state_size() const override {
    const sgd::RoundConfig round = config::to_round_config(config_);
    return round.per_iteration() ? 0 : Diloco::state_floats(round, options_.num_params);
  }
  void on_transport(net::Transport& transport) override {
    transport_ = &transport;
    transport.set_control_handler(
        [this](int peer, std::string_view c) { return store_.on_control(peer, c); });
  }
  Result<std::unique_ptr<daemon::Algorithm>> connect(const std::atomic<bool>& stop) override {
    store_.attach(transport_, link_peers());
    const int n = topology_.num_nodes();
    Result<std::shared_ptr<gloo::Context>> gloo =
        connect_gloo(options_.node, n, topology_.addresses()[options_.node].host, store_,
                     std::chrono::milliseconds(config_.timeouts().connect_ms()),
                     std::chrono::milliseconds(config_.timeouts().deadline_ms()));
    if (!gloo.is_ok()) {
      return stop.load() ? aborted("stop requested (signal) while Gloo connected the nodes")
                         : gloo.status();
    }
    GOSSIP_LOG(kInfo) << "Gloo connected " << n << " nodes (ALLREDUCE, plaintext)";
    if (!config::to_round_config(config_).per_iteration()) {
      return std::unique_ptr<daemon::Algorithm>(std::make_unique<Diloco>(
          options_.node, config_, *gloo, store_, options_.num_params, options_.attached));
    }
    return std::unique_ptr<daemon::Algorithm>(std::make_unique<Allreduce>(
        options_.node, config_, *gloo, store_, *options_.backend, options_.num_params));
  }

 private:
  const config::TrainConfig& config_;
  const topology::Topology& topology_;
  const FactoryOptions options_;
  TransportStore store_;
  net::Transport* transport_ = nullptr;
};
#endif

// PUSH_SUM's staleness τ ≥ 1 on `topology`: at least the longest gap between two messages on one
// edge (else every node would wait at every period), and message buffers that fit in memory.
Status check_staleness(const config::TrainConfig& config, const topology::Topology& topology,
                       const FactoryOptions& options) {
  const std::uint64_t tau = config.staleness();
  const std::int64_t gap = topology::push_sum_edge_gap(topology);
  if (static_cast<std::int64_t>(tau) < gap) {
    return invalid_argument(
        "staleness: " + std::to_string(tau) + " is below " + std::to_string(gap) +
        ", the most iterations between two messages on one edge of topology '" + topology.name() +
        "': every node would wait for its neighbours at every period; set staleness to at least " +
        std::to_string(gap) + ", or to 0 for lock step");
  }
  const std::uint64_t senders = Neighbourhood::senders(topology, options.node).size();
  const std::uint64_t receivers = Neighbourhood::receivers(topology, options.node).size();
  const std::uint64_t bytes =
      AsyncPushSum::buffer_bytes(tau, senders, receivers, options.num_params);
  const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGE_SIZE);
  const std::uint64_t memory =
      pages > 0 && page > 0 ? static_cast<std::uint64_t>(pages) * static_cast<std::uint64_t>(page)
                            : 0;
  if (memory > 0 && bytes > memory / 2) {
    return invalid_argument(
        "staleness: " + std::to_string(tau) + " needs " + std::to_string(bytes >> 20) +
        " MiB of message buffers at node " + std::to_string(options.node) +
        " (τ + 1 receives from each of its " + std::to_string(senders) +
        " in-neighbours and up to two sends to each of its " + std::to_string(receivers) +
        " out-neighbours, " + std::to_string(AsyncPushSum::message_floats(options.num_params)) +
        " floats each), more than half of this machine's " + std::to_string(memory >> 20) +
        " MiB: lower staleness");
  }
  return Status::ok();
}

}  // namespace

Result<std::unique_ptr<daemon::AlgorithmFactory>> make_algorithm_factory(
    const config::TrainConfig& config, const topology::Topology& topology,
    const FactoryOptions& options, const std::atomic<bool>& stop) {
  const sgd::RoundConfig round = config::to_round_config(config);
  if (options.update_session && !round.per_iteration()) {
    return invalid_argument(
        "the attached trainer opened an update session, which hands gossipd its update at every "
        "step; with local_steps, outer or compression set the trainer takes its own steps between "
        "rounds: attach in a plain session (python: update=False)");
  }
  if (config.algorithm() == config::pb::TrainConfig::PUSH_SUM) {
    GOSSIP_RETURN_IF_ERROR(topology::check_push_sum(topology));
    if (config.staleness() > 0) GOSSIP_RETURN_IF_ERROR(check_staleness(config, topology, options));
  }
  if (config.algorithm() != config::pb::TrainConfig::ALLREDUCE) {
    return std::unique_ptr<daemon::AlgorithmFactory>(
        std::make_unique<DpsgdFactory>(config, topology, options));
  }
#if GOSSIP_HAVE_GLOO
  if (!options.insecure) {
    return invalid_argument(
        "algorithm ALLREDUCE needs --insecure: Debian's Gloo has no TLS transport, so its gradient "
        "traffic is plaintext");
  }
  return std::unique_ptr<daemon::AlgorithmFactory>(
      std::make_unique<AllreduceFactory>(config, topology, options, stop));
#else
  (void)stop;
  return invalid_argument(
      "algorithm ALLREDUCE: this gossipd was built without Gloo (cmake -DGOSSIP_GLOO=OFF, as the "
      "aarch64 cross build is); build it with libgloo-dev installed");
#endif
}

}  // namespace gossip::algorithms
