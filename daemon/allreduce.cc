// ALLREDUCE: C-PSGD over Gloo (daemon/allreduce.h).
//
// Why the rendezvous runs over our own links rather than a store Gloo ships: Debian's Gloo has
// FileStore (needs a file system shared by every host), HashStore (one process) and RedisStore (a
// Redis server the cluster does not have), and no TCP store. The star of net::Transport links to
// node 0 needs no port or service beyond the topology's addresses, and its handshake already
// checks that every node runs the same job, algorithm, topology and model.
#include "daemon/allreduce.h"

#include <gloo/allreduce.h>
#include <gloo/common/error.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/transport/tcp/device.h>

#include <algorithm>
#include <cmath>

#include "common/check.h"
#include "common/divergence.h"
#include "common/log.h"
#include "daemon/checkpoint.h"
#include "daemon/control.pb.h"
#include "daemon/exit_codes.h"
#include "daemon/metrics.h"
#include "daemon/node_checkpoints.h"
#include "daemon/node_job.h"

namespace gossip::daemon {
namespace {

// Bytes of a value per StoreSet message (control messages are limited to 1 KiB on the wire).
constexpr std::size_t kPartBytes = 512;

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

std::vector<int> star_peers(int num_nodes, int self) {
  std::vector<int> peers;
  if (self == 0) {
    for (int j = 1; j < num_nodes; ++j) peers.push_back(j);
  } else {
    peers.push_back(0);
  }
  return peers;
}

void TransportStore::send_locked(int peer, const std::string& key, const std::vector<char>& data) {
  std::size_t offset = 0;
  do {
    const std::size_t count = std::min(kPartBytes, data.size() - offset);
    pb::Control c;
    pb::StoreSet* s = c.mutable_store_set();
    s->set_key(key);
    s->set_total_bytes(data.size());
    s->set_offset(offset);
    s->set_data(data.data() + offset, count);
    transport_->send_control(peer, c.SerializeAsString());
    offset += count;
  } while (offset < data.size());
}

void TransportStore::publish_locked(const std::string& key, int except) {
  if (self_ != 0 || transport_ == nullptr) return;
  for (int p : peers_) {
    if (p != except) send_locked(p, key, entries_[key].data);
  }
}

Status TransportStore::on_control(int peer, std::string_view bytes) {
  pb::Control control;
  if (!control.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) {
    return corruption("control message from node " + std::to_string(peer) + " does not parse");
  }
  if (!control.has_store_set()) return Status::ok();
  const pb::StoreSet& s = control.store_set();
  // Only node 0 relays, and only node 0 may send to the others: a part from anyone else, or one
  // that does not fit its value, is ignored (the key then never completes: wait() times out).
  if (self_ != 0 && peer != 0) return Status::ok();
  constexpr std::uint64_t kMaxValueBytes = std::uint64_t{1} << 20;
  if (s.total_bytes() > kMaxValueBytes || s.offset() > s.total_bytes() ||
      s.data().size() > s.total_bytes() - s.offset()) {
    GOSSIP_LOG(kWarning) << "rendezvous: malformed store entry from node " << peer << "; ignored";
    return Status::ok();
  }
  std::lock_guard l(mu_);
  Entry& e = entries_[s.key()];
  // A value's parts come in order over one link (from its owner to node 0, from node 0 to the
  // rest), so offset 0 starts it afresh — also when we hold it already: node 0 may relay a key
  // back to its owner, when the key reached node 0 before attach().
  if (s.offset() == 0) {
    e.data.assign(s.total_bytes(), 0);
    e.received = 0;
  }
  if (e.data.size() != s.total_bytes()) return Status::ok();
  std::copy(s.data().begin(), s.data().end(),
            e.data.begin() + static_cast<std::ptrdiff_t>(s.offset()));
  e.received += s.data().size();
  if (e.received == e.data.size()) {
    publish_locked(s.key(), peer);
    cv_.notify_all();
  }
  return Status::ok();
}

void TransportStore::attach(net::Transport* transport, std::vector<int> peers) {
  std::lock_guard l(mu_);
  transport_ = transport;
  peers_ = std::move(peers);
  if (self_ == 0) {
    // Keys that arrived while other links were still being set up.
    for (const auto& [key, e] : entries_) {
      if (e.received == e.data.size()) publish_locked(key, -1);
    }
  }
}

void TransportStore::set(const std::string& key, const std::vector<char>& data) {
  std::lock_guard l(mu_);
  GOSSIP_CHECK(transport_ != nullptr) << "TransportStore::set before attach";
  Entry& e = entries_[key];
  e.data = data;
  e.received = data.size();
  if (self_ == 0) {
    publish_locked(key, -1);
  } else {
    send_locked(0, key, data);
  }
  cv_.notify_all();
}

std::vector<char> TransportStore::get(const std::string& key) {
  wait({key});
  std::lock_guard l(mu_);
  return entries_.at(key).data;
}

void TransportStore::wait(const std::vector<std::string>& keys,
                          const std::chrono::milliseconds& timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  std::unique_lock l(mu_);
  auto missing = [&] {
    std::string names;
    for (const std::string& k : keys) {
      auto e = entries_.find(k);
      if (e == entries_.end() || e->second.received != e->second.data.size()) names += " " + k;
    }
    return names;
  };
  while (true) {
    const std::string names = missing();
    if (names.empty()) return;
    if (stop_.load() || std::chrono::steady_clock::now() >= deadline) {
      throw gloo::IoException("rendezvous: keys" + names + " not received within " +
                              std::to_string(timeout.count()) + " ms" +
                              (stop_.load() ? " (stop requested)" : ""));
    }
    // Short slices so that a stop request is seen.
    cv_.wait_until(
        l, std::min(deadline, std::chrono::steady_clock::now() + std::chrono::milliseconds(100)));
  }
}

Result<std::shared_ptr<gloo::Context>> connect_gloo(int rank, int size, const std::string& host,
                                                    gloo::rendezvous::Store& store,
                                                    std::chrono::milliseconds connect_timeout,
                                                    std::chrono::milliseconds op_timeout) {
  try {
    gloo::transport::tcp::attr attr;
    attr.hostname = host;
    std::shared_ptr<gloo::transport::Device> device = gloo::transport::tcp::CreateDevice(attr);
    auto context = std::make_shared<gloo::rendezvous::Context>(rank, size);
    context->setTimeout(connect_timeout);
    context->connectFullMesh(store, device);
    context->setTimeout(op_timeout);
    return std::shared_ptr<gloo::Context>(context);
  } catch (const std::exception& e) {
    return unavailable(std::string("Gloo could not connect the nodes: ") + e.what());
  }
}

NodeResult run_allreduce(const NodeOptions& options, const topology::Topology& topology,
                         const sgd::Problem& problem, sgd::Backend& backend,
                         const std::shared_ptr<gloo::Context>& context,
                         const std::atomic<bool>& stop, Env& env) {
  NodeResult result;
  auto fail = [&](int code, const Status& status) {
    result.exit_code = code;
    result.message = status.to_string();
    GOSSIP_LOG(kError) << result.message;
    return result;
  };
  const int self = options.node_id;
  const int n = topology.num_nodes();
  const TrainConfig& cfg = options.config;
  GOSSIP_CHECK_EQ(context->size, n);
  GOSSIP_CHECK_EQ(context->rank, self);
  if (options.resume || options.resume_at) {
    return fail(kExitUsage, invalid_argument("--resume: not supported with algorithm ALLREDUCE"));
  }
  Result<std::unique_ptr<sgd::Model>> model_or = backend.make_model(problem.spec);
  if (!model_or.is_ok()) return fail(kExitUsage, model_or.status());
  sgd::Model& model = **model_or;
  const std::size_t d = problem.spec.num_params();
  // As run_node: epochs count passes over the mean shard.
  const std::uint64_t total =
      config::total_iterations(cfg, static_cast<std::size_t>(problem.train->num_examples / n));
  sgd::OptimizerConfig opt_cfg = config::to_optimizer_config(cfg, total);
  if (Status s = opt_cfg.validate(); !s.is_ok())
    return fail(kExitUsage, s.with_context("optimizer"));
  sgd::Optimizer optimizer(opt_cfg, d);
  sgd::BatchSampler sampler = problem.sampler(self, static_cast<int>(cfg.batch_size()));
  const bool on_host = backend.device() == sgd::Device::kCpu;

  sgd::DeviceBuffer x = backend.alloc(d), grad = backend.alloc(d), update = backend.alloc(d),
                    state = backend.alloc(std::max<std::size_t>(optimizer.state_size(), 1));
  // What Gloo reduces in place: the gradient in host memory (page-locked on a GPU node).
  sgd::DeviceBuffer sum_host = backend.alloc_host(d);
  std::vector<float> initial = problem.initial_params();
  backend.copy_to_device(x.data(), initial.data(), d);
  backend.synchronize();

  Result<MetricsWriter> metrics_or =
      MetricsWriter::open(options.metrics_path, self, cfg.metrics_every(), options.append_metrics);
  if (!metrics_or.is_ok()) return fail(kExitError, metrics_or.status());
  MetricsWriter& metrics = *metrics_or;
  const std::shared_ptr<const sgd::Dataset> eval_set = evaluation_set(cfg, problem.test);

  NodeCheckpoints checkpoints(
      env, {options.checkpoint_dir, false, false, std::nullopt, cfg.checkpoint().keep()},
      {static_cast<std::uint32_t>(self), d, optimizer.state_size(), topology.fingerprint(),
       config_fingerprint(cfg)});
  auto save = [&](std::uint64_t iteration, const sgd::SamplerState& ss) -> Status {
    std::vector<float> params(d), optimizer_state(optimizer.state_size());
    backend.copy_to_host(params.data(), x.data(), d);
    if (!optimizer_state.empty()) {
      backend.copy_to_host(optimizer_state.data(), state.data(), optimizer_state.size());
    }
    return checkpoints.save(iteration, std::move(params), ss, std::move(optimizer_state));
  };
  auto stop_now = [&](std::uint64_t iteration, const sgd::SamplerState& ss, int code,
                      const std::string& why) {
    metrics.flush_iterations();
    metrics.event(iteration, code == kExitStopped ? "stopped" : "neighbour_failed", why);
    result.exit_code = code;
    result.iterations_done = iteration;
    result.message = why;
    if (code == kExitStopped) {
      GOSSIP_LOG(kInfo) << why;
    } else {
      GOSSIP_LOG(kError) << why;
    }
    if (Status s = save(iteration, ss); !s.is_ok()) {
      GOSSIP_LOG(kError) << "checkpoint at iteration " << iteration << " failed: " << s.to_string();
      result.message += "; checkpoint failed: " + s.to_string();
    } else if (!options.checkpoint_dir.empty()) {
      GOSSIP_LOG(kInfo) << "checkpoint written at iteration " << iteration;
    }
    return result;
  };

  const auto timeout = std::chrono::milliseconds(cfg.timeouts().deadline_ms());
  // Ring allreduce: reduce-scatter then allgather, each n − 1 steps of a 1/n share, to and from
  // the ring neighbours: what every node sends and receives per iteration (Gloo does not count).
  const std::uint64_t ring_bytes =
      n > 1 ? 2 * static_cast<std::uint64_t>(n - 1) * ((d + n - 1) / n) * sizeof(float) : 0;
  sgd::Batch batch;
  for (std::uint64_t t = 0; t < total; ++t) {
    const sgd::SamplerState before = sampler.state();
    if (stop.load(std::memory_order_relaxed)) {
      return stop_now(t, before, kExitStopped, "stop requested (signal)");
    }
    const auto it = static_cast<std::int64_t>(t);
    IterationStats stats;
    const auto t0 = std::chrono::steady_clock::now();
    sgd::gather(*problem.train, sampler.next(), batch);
    stats.loss = model.loss_and_grad(x.data(), batch, grad.data());
    backend.copy_to_host(sum_host.data(), grad.data(), d);  // waits for the gradient
    stats.compute_s = seconds_since(t0);

    const auto t1 = std::chrono::steady_clock::now();
    if (n > 1) {
      try {
        gloo::AllreduceOptions opts(context);
        opts.setAlgorithm(gloo::AllreduceOptions::Algorithm::RING);
        opts.setOutput(sum_host.data(), d);
        opts.setReduceFunction(
            static_cast<void (*)(void*, const void*, const void*, size_t)>(&gloo::sum<float>));
        opts.setTag(static_cast<std::uint32_t>(t));
        opts.setTimeout(timeout);
        gloo::allreduce(opts);
      } catch (const std::exception& e) {
        return stop_now(t, before, kExitNeighbourFailed,
                        "allreduce of iteration " + std::to_string(t) +
                            " failed (a node died, hung or left; timeouts.deadline_ms=" +
                            std::to_string(timeout.count()) + "): " + e.what());
      }
    }
    stats.exchange_s = seconds_since(t1);
    stats.wait_s = stats.exchange_s;  // nothing overlaps the allreduce
    // g = s / n, rounded like gossip-sim's (double sum / n, rounded once).
    float* s = sum_host.data();
    for (std::size_t k = 0; k < d; ++k) s[k] = static_cast<float>(static_cast<double>(s[k]) / n);

    const auto t2 = std::chrono::steady_clock::now();
    backend.copy_to_device(grad.data(), sum_host.data(), d);
    optimizer.step(backend, it, x.data(), grad.data(),
                   optimizer.state_size() > 0 ? state.data() : nullptr, update.data());
    if (!on_host) backend.synchronize();
    stats.mix_s = seconds_since(t2);
    stats.iteration_s = seconds_since(t0);
    stats.lr = optimizer.learning_rate(it);
    stats.bytes_sent = ring_bytes;
    stats.bytes_received = ring_bytes;
    metrics.add_iteration(t, stats);
    if (!std::isfinite(stats.loss)) {
      // Diverged (common/divergence.h), the rule gossip-sim and run_node follow: stop without
      // writing x anywhere. Every node sees the same averaged gradient, so all stop together.
      metrics.flush_iterations();
      const Status s = diverged(it, "the training loss is " + std::to_string(stats.loss));
      metrics.event(t, "diverged", s.message());
      result.iterations_done = t;
      return fail(kExitDiverged, s);
    }

    const std::uint64_t done = t + 1;
    result.iterations_done = done;
    if (cfg.eval_every() > 0 && done % cfg.eval_every() == 0 && done < total) {
      sgd::EvalResult e = model.evaluate(x.data(), *eval_set);
      metrics.eval(done, e.loss, e.accuracy);
    }
    if (cfg.checkpoint().every() > 0 && done % cfg.checkpoint().every() == 0 && done < total) {
      if (Status st = save(done, sampler.state()); !st.is_ok()) {
        if (st.code() == StatusCode::kAborted) {
          metrics.flush_iterations();
          metrics.event(done, "diverged", st.message());
          return fail(kExitDiverged, st);
        }
        GOSSIP_LOG(kError) << "periodic checkpoint failed: " << st.to_string();
        metrics.event(done, "checkpoint_failed", st.to_string());
      }
    }
  }

  metrics.flush_iterations();
  result.iterations_done = total;
  sgd::EvalResult e = model.evaluate(x.data(), *problem.test);
  metrics.eval(total, e.loss, e.accuracy);
  result.final_test_accuracy = e.accuracy;
  result.final_test_loss = e.loss;
  if (Status s = save(total, sampler.state()); !s.is_ok()) {
    if (s.code() == StatusCode::kAborted) return fail(kExitDiverged, s);
    return fail(kExitError, s.with_context("final checkpoint"));
  }
  std::vector<float> host(d);
  backend.copy_to_host(host.data(), x.data(), d);
  if (Status s = write_final_parameters(env, options, host, total); !s.is_ok()) {
    return fail(s.code() == StatusCode::kAborted ? kExitDiverged : kExitError, s);
  }
  result.exit_code = kExitOk;
  result.message = "done";
  GOSSIP_LOG(kInfo) << "finished " << total << " iterations (ALLREDUCE); model test accuracy "
                    << e.accuracy << ", loss " << e.loss;
  return result;
}

}  // namespace gossip::daemon
