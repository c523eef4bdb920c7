// The parts of a node shared by the driver and the commands (see node.h).
#include "daemon/node.h"

#include <zlib.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <map>
#include <span>
#include <utility>
#include <vector>

#include "common/clock.h"
#include "common/divergence.h"
#include "common/log.h"
#include "config/sgd_config.h"
#include "daemon/exit_codes.h"
#include "daemon/metrics.h"
#include "daemon/node_checkpoints.h"
#include "daemon/node_job.h"
#include "daemon/outputs.h"
#include "daemon/param_buffers.h"

namespace gossip::daemon {

std::string config_fingerprint(const TrainConfig& config) {
  TrainConfig c;
  *c.mutable_model() = config.model();
  *c.mutable_data() = config.data();
  c.mutable_data()->clear_path();
  *c.mutable_shard() = config.shard();
  c.set_batch_size(config.batch_size());
  *c.mutable_optimizer() = config.optimizer();
  // lr has presence since it became required; an lr of 0 printed nothing before, so the text
  // (and the fingerprint of checkpoints written then) stays the same without it.
  if (c.optimizer().lr() == 0) c.mutable_optimizer()->clear_lr();
  c.set_seed(config.seed());
  // Only ALLREDUCE is named, so the fingerprints of D-PSGD checkpoints stay what they were; rounds
  // likewise only when they differ from one exchange per iteration.
  if (config.algorithm() == config::pb::TrainConfig::ALLREDUCE) c.set_algorithm(config.algorithm());
  if (!config::to_round_config(config).per_iteration()) {
    c.set_local_steps(config.local_steps());
    *c.mutable_outer() = config.outer();
    *c.mutable_compression() = config.compression();
    c.set_overlap(config.overlap());
  }
  std::string text = config::to_text(c);
  uLong crc =
      crc32(0L, reinterpret_cast<const Bytef*>(text.data()), static_cast<uInt>(text.size()));
  char buf[16];
  std::snprintf(buf, sizeof buf, "%08lx", static_cast<unsigned long>(crc));
  return buf;
}

std::uint64_t topology_fingerprint64(const topology::Topology& topology) {
  return std::stoull(topology.fingerprint().substr(0, 16), nullptr, 16);
}

std::vector<int> all_neighbours(const topology::Topology& topology, int node) {
  std::vector<int> peers;
  for (int t = 0; t < topology.period(); ++t) {
    for (const topology::Neighbor& nb : topology.in_neighbors(node, t)) peers.push_back(nb.node);
    for (const topology::Neighbor& nb : topology.out_neighbors(node, t)) peers.push_back(nb.node);
  }
  std::sort(peers.begin(), peers.end());
  peers.erase(std::unique(peers.begin(), peers.end()), peers.end());
  return peers;
}

Status write_final_parameters(Env& env, const NodeOptions& options, std::span<const float> x,
                              std::uint64_t iteration) {
  const int self = options.node_id;
  std::vector<std::pair<std::string, const char*>> outputs;  // path, what asked for it
  if (!options.dump_params_dir.empty()) {
    outputs.emplace_back(dump_params_file(options.dump_params_dir, self), "--dump-params");
  }
  if (!options.config.final_params_path().empty()) {
    outputs.emplace_back(final_params_path_for(options.config.final_params_path(), self),
                         "final_params_path");
  }
  if (outputs.empty()) return Status::ok();
  if (!all_finite(x)) {
    return diverged(static_cast<std::int64_t>(iteration),
                    "the final parameters contain NaN or Inf (not written)");
  }
  const std::string_view bytes(reinterpret_cast<const char*>(x.data()), x.size() * sizeof(float));
  for (const auto& [path, what] : outputs) {
    Status s = Status::ok();
    if (const std::size_t slash = path.rfind('/'); slash != std::string::npos && slash > 0) {
      s = env.create_dirs(path.substr(0, slash));
    }
    if (s.is_ok()) s = env.write_file_atomic(path, bytes);
    if (!s.is_ok()) return s.with_context(what);
  }
  return Status::ok();
}

Result<NodeStart> open_node_start(const NodeOptions& options, const topology::Topology& topology,
                                  const NodeJob& job, int* exit_code,
                                  std::size_t algorithm_state_size, Env& env) {
  const TrainConfig& cfg = options.config;
  NodeStart s{NodeCheckpoints(env,
                              {options.checkpoint_dir, options.resume, options.resume_or_start,
                               options.resume_at, cfg.checkpoint().keep()},
                              {static_cast<std::uint32_t>(options.node_id), job.num_params,
                               job.step->state_size() + algorithm_state_size,
                               topology.fingerprint(), config_fingerprint(cfg)}),
              std::nullopt};
  Result<std::optional<Checkpoint>> resumed = s.checkpoints.open(exit_code);
  if (!resumed.is_ok()) return resumed.status();
  s.resumed = std::move(*resumed);
  return s;
}

}  // namespace gossip::daemon
