// Cost model: stragglers and the simulated clocks (the closed forms are topology/comm_cost.cc).
#include "sim/cost_model.h"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "common/check.h"
#include "common/enum_names.h"
#include "common/random.h"
#include "common/strings.h"

namespace gossip::sim {

double StragglerModel::slowdown(std::int64_t iteration, int node) const {
  if (kind == Kind::kNone || kind == Kind::kLink) return 1.0;
  if (kind == Kind::kNode) return node == this->node ? factor : 1.0;
  // A fresh stream per (iteration, node): draws do not depend on the order they are asked in.
  Rng rng(mix_seed(seed, static_cast<std::uint64_t>(iteration)), static_cast<std::uint64_t>(node));
  if (kind == Kind::kBernoulli) return rng.uniform() < probability ? factor : 1.0;
  return std::exp(sigma * rng.normal());
}

std::string StragglerModel::to_string() const {
  std::ostringstream s;
  switch (kind) {
    case Kind::kNone:
      return "none";
    case Kind::kBernoulli:
      s << "bernoulli:" << probability << ":" << factor;
      break;
    case Kind::kLognormal:
      s << "lognormal:" << sigma;
      break;
    case Kind::kNode:
      s << "node:" << node << ":" << factor;
      break;
    case Kind::kLink:
      s << "link:" << node << ":" << factor;
      break;
  }
  return s.str();
}

Result<StragglerModel> parse_straggler_model(std::string_view spec, std::uint64_t seed) {
  StragglerModel m;
  m.seed = seed;
  spec = trim(spec);
  std::vector<std::string_view> parts;
  while (true) {
    const auto colon = spec.find(':');
    parts.push_back(spec.substr(0, colon));
    if (colon == std::string_view::npos) break;
    spec.remove_prefix(colon + 1);
  }
  auto number = [&](std::string_view s, const char* what) -> Result<double> {
    auto v = parse_number(s);
    if (!v.is_ok()) return v.status().with_context(std::string("straggler ") + what);
    return *v;
  };
  if (parts[0] == "none" && parts.size() == 1) return m;
  if (parts[0] == "bernoulli" && parts.size() == 3) {
    m.kind = StragglerModel::Kind::kBernoulli;
    GOSSIP_ASSIGN_OR_RETURN(m.probability, number(parts[1], "probability"));
    GOSSIP_ASSIGN_OR_RETURN(m.factor, number(parts[2], "factor"));
    if (m.probability > 1) return invalid_argument("straggler probability must be in [0, 1]");
    if (m.factor < 1) return invalid_argument("straggler factor must be >= 1");
    return m;
  }
  if (parts[0] == "lognormal" && parts.size() == 2) {
    m.kind = StragglerModel::Kind::kLognormal;
    GOSSIP_ASSIGN_OR_RETURN(m.sigma, number(parts[1], "sigma"));
    return m;
  }
  if ((parts[0] == "node" || parts[0] == "link") && parts.size() == 3) {
    m.kind = parts[0] == "node" ? StragglerModel::Kind::kNode : StragglerModel::Kind::kLink;
    GOSSIP_ASSIGN_OR_RETURN(const double k, number(parts[1], "node"));
    if (!(k >= 0 && k < 1e9 && k == std::floor(k))) {
      return invalid_argument("straggler node must be a node id (a whole number >= 0)");
    }
    m.node = static_cast<int>(k);
    GOSSIP_ASSIGN_OR_RETURN(m.factor, number(parts[2], "factor"));
    if (m.factor < 1) return invalid_argument("straggler factor must be >= 1");
    return m;
  }
  return invalid_argument("straggler model '" + std::string(parts[0]) +
                          "...': expected none, bernoulli:P:FACTOR, lognormal:SIGMA, "
                          "node:K:FACTOR or link:K:FACTOR");
}

namespace {
constexpr EnumName<Scheme> kSchemeNames[] = {{Scheme::kParameterServer, "parameter-server"},
                                             {Scheme::kRingAllreduce, "ring-allreduce"},
                                             {Scheme::kGossip, "gossip"}};
}  // namespace

std::string_view scheme_name(Scheme scheme) { return enum_name(kSchemeNames, scheme); }

namespace {
constexpr EnumName<AllreduceModel> kAllreduceModelNames[] = {
    {AllreduceModel::kTable1, "table1"},
    {AllreduceModel::kGloo, "gloo"},
    {AllreduceModel::kGlooHops, "gloo-hops"}};
// gloo/allreduce.h: AllreduceOptions::kMaxSegmentSize; the ring keeps two segments in flight.
constexpr double kGlooMaxSegmentBytes = 1024.0 * 1024.0;
constexpr double kGlooSegmentsInFlight = 2.0;
constexpr double kGlooElementBytes = 4.0;  // float32: Gloo rounds a segment up to whole elements
}  // namespace

std::string_view allreduce_model_name(AllreduceModel model) {
  return enum_name(kAllreduceModelNames, model);
}

Result<AllreduceModel> parse_allreduce_model(std::string_view name) {
  return parse_enum(kAllreduceModelNames, name, "allreduce model");
}

GlooSegments gloo_segments(int num_nodes, double message_bytes) {
  GOSSIP_CHECK_GT(num_nodes, 0);
  const double n = num_nodes;
  const double wanted = std::max(std::ceil(message_bytes / kGlooMaxSegmentBytes), 2.0 * n);
  const double k = std::ceil(wanted / n) * n;  // a multiple of n, at least 2n
  GlooSegments g;
  g.per_rank = static_cast<int>(k / n);
  g.bytes = std::ceil(std::ceil(message_bytes / k) / kGlooElementBytes) * kGlooElementBytes;
  return g;
}

double gloo_ring_allreduce_comm_s(int num_nodes, double message_bytes, const Network& net) {
  if (num_nodes <= 1) return 0.0;
  const GlooSegments g = gloo_segments(num_nodes, message_bytes);
  const double transfer = g.bytes / net.bytes_per_second();
  const double hop = std::max(transfer, (2.0 * net.latency_s + transfer) / kGlooSegmentsInFlight);
  return 2.0 * (num_nodes - 1) * g.per_rank * hop;
}

double gloo_hops_allreduce_comm_s(int num_nodes, double message_bytes, const Network& net) {
  if (num_nodes <= 1) return 0.0;
  const double chunk = std::ceil(message_bytes / num_nodes);
  return 2.0 * (num_nodes - 1) * (2.0 * net.latency_s + chunk / net.bytes_per_second());
}

double allreduce_comm_s(AllreduceModel model, int num_nodes, double message_bytes,
                        const Network& net) {
  switch (model) {
    case AllreduceModel::kGloo:
      return gloo_ring_allreduce_comm_s(num_nodes, message_bytes, net);
    case AllreduceModel::kGlooHops:
      return gloo_hops_allreduce_comm_s(num_nodes, message_bytes, net);
    case AllreduceModel::kTable1:
      break;
  }
  return ring_allreduce_comm_s(num_nodes, message_bytes, net);
}

SimClock::SimClock(Scheme scheme, int num_nodes, CostInputs inputs)
    : scheme_(scheme), num_nodes_(num_nodes), in_(inputs) {
  GOSSIP_CHECK_GT(num_nodes, 0);
  GOSSIP_CHECK_GT(in_.cpu_share, 0.0);
  GOSSIP_CHECK_GT(in_.net.payload_fraction, 0.0);
  if (scheme_ == Scheme::kGossip) {
    start_s_.assign(num_nodes, 0.0);
    next_s_.assign(num_nodes, 0.0);
  }
  if (scheme_ == Scheme::kGossip && in_.asynchronous) {
    const auto n = static_cast<std::size_t>(num_nodes);
    egress_free_s_.assign(n, 0.0);
    taken_s_.assign(n * n, 0.0);
    ever_in_.assign(n, std::vector<bool>(n, false));
  }
}

void SimClock::advance_asynchronous(std::int64_t iteration,
                                    const std::vector<std::vector<int>>& in_neighbours) {
  const auto n = static_cast<std::size_t>(num_nodes_);
  const bool slow = in_.straggler.kind != StragglerModel::Kind::kNone;
  const bool slow_host = in_.straggler.kind == StragglerModel::Kind::kNode;
  const bool slow_link = in_.straggler.kind == StragglerModel::Kind::kLink;
  // One message on one link: latency and wire time (a slow link's at 1/factor of the rate).
  last_comm_s_ = gossip_comm_s(1, in_.message_bytes, in_.net);
  Network slow_net = in_.net;
  if (slow_link) slow_net.bandwidth_bps /= in_.straggler.factor;
  const double slow_comm_s = gossip_comm_s(1, in_.message_bytes, slow_net);
  // The others share what CPU a slow host leaves (nobody waits for it).
  double others_share = in_.cpu_share;
  if (slow_host && num_nodes_ > 1 && in_.cpu_share < 1.0) {
    others_share =
        std::min(1.0, (num_nodes_ * in_.cpu_share - in_.cpu_share / in_.straggler.factor) /
                          (num_nodes_ - 1));
  }
  std::vector<double> bytes(n, 0.0), messages(n, 0.0);
  for (std::size_t i = 0; i < n; ++i) {
    for (int j_id : in_neighbours[i]) {
      const auto j = static_cast<std::size_t>(j_id);
      ever_in_[i][j] = true;
      messages[j] += 1;  // the message, or the skip notice
      messages[i] += 1;
      double& taken = taken_s_[j * n + i];
      if (taken > start_s_[j]) continue;  // the previous one is not yet taken: skipped
      const double comm = slow_link && j_id == in_.straggler.node ? slow_comm_s : last_comm_s_;
      const double leaves = std::max(start_s_[j], egress_free_s_[j]);
      egress_free_s_[j] = leaves + (comm - in_.net.latency_s);
      taken = std::max(leaves + comm, start_s_[i]) + in_.net.latency_s;  // + the acknowledgement
      bytes[j] += in_.message_bytes;
      bytes[i] += in_.message_bytes;
    }
  }
  double now = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const double s = slow ? in_.straggler.slowdown(iteration, static_cast<int>(i)) : 1.0;
    const bool is_slow = slow_host && static_cast<int>(i) == in_.straggler.node;
    const double share = slow_host && !is_slow ? others_share : in_.cpu_share;
    start_s_[i] +=
        (in_.compute_s * s + in_.cpu_s_per_byte * bytes[i] * (slow_host ? s : 1.0)) / share +
        messages[i] * in_.message_overhead_s;
  }
  for (std::size_t i = 0; i < n; ++i) {
    // Alone once its in-neighbours have ended: its clock runs no further than theirs.
    double heard = -1;
    for (std::size_t j = 0; j < n; ++j) {
      if (ever_in_[i][j]) heard = std::max(heard, start_s_[j]);
    }
    now = std::max(now, heard < 0 ? start_s_[i] : std::min(start_s_[i], heard));
  }
  now_s_ = now;
}

void SimClock::advance(std::int64_t iteration, const std::vector<std::vector<int>>& in_neighbours,
                       int max_degree) {
  const bool slow = in_.straggler.kind != StragglerModel::Kind::kNone;
  if (scheme_ != Scheme::kGossip) {
    double compute = in_.compute_s;
    if (slow) {
      double worst = 0;
      for (int i = 0; i < num_nodes_; ++i)
        worst = std::max(worst, in_.straggler.slowdown(iteration, i));
      compute *= worst;  // the round waits for the slowest of all n workers
    }
    const bool ps = scheme_ == Scheme::kParameterServer;
    const bool gloo = !ps && in_.allreduce == AllreduceModel::kGloo;
    // A slow link (kLink) carries its share at 1/factor of the rate: every step of a ring, and the
    // server's fan-in / fan-out, waits for it.
    Network net = in_.net;
    if (in_.straggler.kind == StragglerModel::Kind::kLink)
      net.bandwidth_bps /= in_.straggler.factor;
    last_comm_s_ = ps ? parameter_server_comm_s(num_nodes_, in_.message_bytes, net)
                      : allreduce_comm_s(in_.allreduce, num_nodes_, in_.message_bytes, net);
    // Sent and received by the busiest host: the server, or any node of the ring.
    const double moved =
        2.0 * (ps ? topology::parameter_server_bytes(num_nodes_, in_.message_bytes)
                  : topology::ring_allreduce_bytes_per_node(num_nodes_, in_.message_bytes));
    const double messages =
        ps     ? 2.0 * num_nodes_
        : gloo ? 2.0 * (num_nodes_ - 1) * gloo_segments(num_nodes_, in_.message_bytes).per_rank
               : 4.0 * (num_nodes_ - 1);
    // A slow host (kNode) has less of everything its CPU does: the per-byte work too.
    const double cpu_slow =
        in_.straggler.kind == StragglerModel::Kind::kNode ? in_.straggler.factor : 1.0;
    now_s_ += compute / in_.cpu_share +
              std::max(last_comm_s_, cpu_slow * in_.cpu_s_per_byte * moved / in_.cpu_share +
                                         messages * in_.message_overhead_s);
    return;
  }
  GOSSIP_CHECK_EQ(static_cast<int>(in_neighbours.size()), num_nodes_);
  if (in_.asynchronous) {
    advance_asynchronous(iteration, in_neighbours);
    return;
  }
  last_comm_s_ = gossip_comm_s(max_degree, in_.message_bytes, in_.net);
  // Messages each node sends and receives this iteration (a lone node: none).
  std::vector<int> messages(static_cast<std::size_t>(num_nodes_), 0);
  for (int i = 0; i < num_nodes_; ++i) {
    messages[static_cast<std::size_t>(i)] += static_cast<int>(in_neighbours[i].size());
    for (int j : in_neighbours[i]) ++messages[static_cast<std::size_t>(j)];
  }
  // When each node's compute is done, and when it sends: at its start (the exchange overlaps the
  // compute) or once its compute is done.
  std::vector<double> done(static_cast<std::size_t>(num_nodes_), 0.0);
  const bool slow_host = in_.straggler.kind == StragglerModel::Kind::kNode;
  for (int i = 0; i < num_nodes_; ++i) {
    // A compute straggler slows the step; a slow host (kNode) all of its CPU work.
    const double s = slow ? in_.straggler.slowdown(iteration, i) : 1.0;
    const double c =
        (in_.compute_s * s + in_.cpu_s_per_byte * messages[static_cast<std::size_t>(i)] *
                                 in_.message_bytes * (slow_host ? s : 1.0)) /
        in_.cpu_share;
    done[static_cast<std::size_t>(i)] = start_s_[i] + c;
  }
  const std::vector<double>& sends = in_.gossip_overlaps_compute ? start_s_ : done;
  double latest = 0;
  // A slow link (kLink): that node's sends take factor times as long on the wire.
  const bool slow_link = in_.straggler.kind == StragglerModel::Kind::kLink;
  double slow_comm_s = last_comm_s_;
  if (slow_link) {
    Network net = in_.net;
    net.bandwidth_bps /= in_.straggler.factor;
    slow_comm_s = gossip_comm_s(max_degree, in_.message_bytes, net);
  }
  for (int i = 0; i < num_nodes_; ++i) {
    double t = done[static_cast<std::size_t>(i)];
    // With no in-neighbours (a lone node) nothing is received and nothing is waited for.
    for (int j : in_neighbours[i]) {
      t = std::max(t,
                   sends[j] + (slow_link && j == in_.straggler.node ? slow_comm_s : last_comm_s_));
    }
    t += messages[static_cast<std::size_t>(i)] * in_.message_overhead_s;
    next_s_[i] = t;
    latest = std::max(latest, t);
  }
  start_s_.swap(next_s_);
  now_s_ = latest;
}

}  // namespace gossip::sim
