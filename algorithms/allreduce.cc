// ALLREDUCE: C-PSGD over Gloo (daemon/allreduce.h).
//
// Why the rendezvous runs over our own links rather than a store Gloo ships: Debian's Gloo has
// FileStore (needs a file system shared by every host), HashStore (one process) and RedisStore (a
// Redis server the cluster does not have), and no TCP store. The star of net::Transport links to
// node 0 needs no port or service beyond the topology's addresses, and its handshake already
// checks that every node runs the same job, algorithm, topology and model.
#include "algorithms/allreduce.h"

#include <gloo/allreduce.h>
#include <gloo/common/error.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/transport/tcp/device.h>

#include <algorithm>
#include <cmath>

#include "common/check.h"
#include "common/log.h"
#include "daemon/control.pb.h"
#include "daemon/exit_codes.h"

namespace gossip::algorithms {
namespace {

// Bytes of a value per StoreSet message (control messages are limited to 1 KiB on the wire).
constexpr std::size_t kPartBytes = 512;

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
    daemon::pb::Control c;
    daemon::pb::StoreSet* s = c.mutable_store_set();
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
  daemon::pb::Control control;
  if (!control.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) {
    return corruption("control message from node " + std::to_string(peer) + " does not parse");
  }
  if (!control.has_store_set()) return Status::ok();
  const daemon::pb::StoreSet& s = control.store_set();
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

Allreduce::Allreduce(int node, const config::TrainConfig& config,
                     std::shared_ptr<gloo::Context> context, TransportStore& store,
                     sgd::Backend& backend, std::size_t num_params)
    : self_(node),
      num_nodes_(context->size),
      timeout_(config.timeouts().deadline_ms()),
      context_(std::move(context)),
      store_(store),
      backend_(backend),
      num_params_(num_params),
      host_(backend.alloc_host(num_params)) {
  GOSSIP_CHECK_EQ(context_->rank, node);
}

Status agree_start(TransportStore& store, int self, int num_nodes, std::uint64_t start,
                   const daemon::RunServices& services, int* exit_code) {
  const std::string mine = std::to_string(start);
  std::vector<std::string> keys;
  try {
    store.set("start/" + std::to_string(self), std::vector<char>(mine.begin(), mine.end()));
    for (int j = 0; j < num_nodes; ++j) keys.push_back("start/" + std::to_string(j));
    store.wait(keys);
  } catch (const std::exception& e) {
    *exit_code = services.interrupted() ? daemon::kExitStopped : daemon::kExitNeighbourFailed;
    return unavailable(std::string("ALLREDUCE: the nodes' start iterations: ") + e.what());
  }
  std::string starts;
  bool agree = true;
  for (int j = 0; j < num_nodes; ++j) {
    const std::vector<char> v = store.get(keys[j]);
    const std::string theirs(v.begin(), v.end());
    agree = agree && theirs == mine;
    starts += (j ? ", " : "") + std::string("node ") + std::to_string(j) + " at " + theirs;
  }
  if (agree) return Status::ok();
  *exit_code = daemon::kExitCannotResume;
  return failed_precondition(
      "ALLREDUCE: the nodes start from different iterations (" + starts +
      "); every node must resume from the same checkpoint iteration: gossipd launch --resume "
      "picks the newest one all nodes hold, or give every node --resume-at N");
}

Result<std::uint64_t> Allreduce::start(std::uint64_t start, bool /*rejoining*/,
                                       std::uint64_t /*total*/, daemon::RunServices& services,
                                       int* exit_code) {
  services_ = &services;
  GOSSIP_RETURN_IF_ERROR(agree_start(store_, self_, num_nodes_, start, services, exit_code));
  return start;
}

bool Allreduce::average(std::uint64_t t, float* v, std::string* why) {
  const int n = num_nodes_;
  if (n > 1) {
    try {
      gloo::AllreduceOptions opts(context_);
      opts.setAlgorithm(gloo::AllreduceOptions::Algorithm::RING);
      opts.setOutput(v, num_params_);
      opts.setReduceFunction(
          static_cast<void (*)(void*, const void*, const void*, size_t)>(&gloo::sum<float>));
      opts.setTag(static_cast<std::uint32_t>(t));
      opts.setTimeout(timeout_);
      gloo::allreduce(opts);
    } catch (const std::exception& e) {
      *why = "allreduce of iteration " + std::to_string(t) +
             " failed (a node died, hung or left; timeouts.deadline_ms=" +
             std::to_string(timeout_.count()) + "): " + e.what();
      GOSSIP_LOG(kError) << *why;
      return false;
    }
  }
  // The mean, rounded like gossip-sim's (double sum / n, rounded once).
  for (std::size_t k = 0; k < num_params_; ++k) {
    v[k] = static_cast<float>(static_cast<double>(v[k]) / n);
  }
  return true;
}

daemon::IterationOutcome Allreduce::iterate(std::uint64_t t, daemon::LocalStep& step,
                                            daemon::ParameterBuffers& buffers) {
  using daemon::IterationEnd;
  Clock& clock = services_->clock;
  daemon::IterationStats stats;
  const std::int64_t t0 = clock.monotonic_ns();
  const std::optional<double> loss = step.gradient(buffers.x(), t);
  if (Status s = step.before_mix(t, buffers); !s.is_ok()) {
    return IterationEnd{IterationEnd::Kind::kStepFailed, 0, s};
  }
  // What is averaged (allreduce.h): the gradient, the attached trainer's update, or its x_t.
  float* gradient = step.gradient_buffer();
  float* averaged = host_.data();
  if (gradient != nullptr) {
    backend_.copy_to_host(averaged, gradient, num_params_);  // waits for the gradient
  } else if (step.has_update()) {
    averaged = buffers.update();  // host memory: an attached trainer's step runs on the cpu
  } else {
    buffers.x_to_host(std::span<float>(averaged, num_params_));
  }
  const std::int64_t t1 = clock.monotonic_ns();
  std::string why;
  if (!average(t, averaged, &why)) {
    return IterationEnd{IterationEnd::Kind::kAbandon, daemon::kExitNeighbourFailed, aborted(why)};
  }
  const std::int64_t t2 = clock.monotonic_ns();
  if (gradient == nullptr && !step.has_update()) {
    buffers.set_x(std::span<const float>(averaged, num_params_));
  } else {
    if (gradient != nullptr) backend_.copy_to_device(gradient, averaged, num_params_);
    stats.lr = step.direction(buffers.x(), buffers.update(), t);
    buffers.mix(self_, daemon::RowWeights{}, static_cast<float>(stats.lr), true);
  }
  if (backend_.device() != sgd::Device::kCpu) backend_.synchronize();
  const std::int64_t t3 = clock.monotonic_ns();
  stats.compute_s = static_cast<double>(t1 - t0) * 1e-9;
  stats.exchange_s = static_cast<double>(t2 - t1) * 1e-9;
  stats.wait_s = stats.exchange_s;  // nothing overlaps the allreduce
  stats.mix_s = static_cast<double>(t3 - t2) * 1e-9;
  stats.iteration_s = static_cast<double>(t3 - t0) * 1e-9;
  // Ring allreduce: reduce-scatter then allgather, each n − 1 steps of a 1/n share, to and from
  // the ring neighbours: what every node sends and receives per iteration (Gloo does not count).
  const auto n = static_cast<std::uint64_t>(num_nodes_);
  const std::uint64_t ring_bytes =
      n > 1 ? 2 * (n - 1) * ((num_params_ + n - 1) / n) * sizeof(float) : 0;
  stats.bytes_sent = ring_bytes;
  stats.bytes_received = ring_bytes;
  return daemon::IterationReport{loss, stats};
}

}  // namespace gossip::algorithms
