// BatchSampler: the deterministic mini-batch stream of one node. Each epoch is a fresh permutation
// of the node's shard drawn from Rng(mix_seed(seed, node)); batches are consecutive runs of
// batch_size indices, continuing into the next epoch's permutation when an epoch runs out, so every
// batch has exactly batch_size examples. Node i at iteration t gets the same batch in the simulator
// and in gossipd given the same (shard, batch_size, seed, node).
//
// State (for checkpoints) is three numbers and the generator's state at the start of the current
// epoch; restoring it replays the same stream. Not thread-safe.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "common/random.h"
#include "common/status.h"

namespace gossip::sgd {

struct SamplerState {
  Rng::State epoch_rng_state{};  // generator state before this epoch's shuffle
  std::uint64_t epoch = 0;
  std::uint64_t position = 0;  // next index within this epoch's permutation
  std::uint64_t batches = 0;   // batches drawn so far (= iteration count)
};

class BatchSampler {
 public:
  // `shard` must be non-empty and batch_size > 0 (GOSSIP_CHECK).
  BatchSampler(std::vector<std::int64_t> shard, int batch_size, std::uint64_t seed,
               std::uint64_t node);

  // The next batch's example indices; valid until the next call.
  std::span<const std::int64_t> next();

  SamplerState state() const;
  // Restores a state saved from a sampler over the same shard; InvalidArgument if it cannot be.
  Status restore(const SamplerState& state);

  int batch_size() const { return batch_size_; }
  std::size_t shard_size() const { return shard_.size(); }

 private:
  void start_epoch();

  std::vector<std::int64_t> shard_;
  std::vector<std::int64_t> perm_;
  std::vector<std::int64_t> batch_;
  int batch_size_;
  Rng rng_;
  Rng::State epoch_rng_state_{};
  std::uint64_t epoch_ = 0;
  std::uint64_t position_ = 0;
  std::uint64_t batches_ = 0;
};

}  // namespace gossip::sgd
