// Per-node mini-batch stream. Saving the generator state *before* each epoch's shuffle (rather
// than the permutation itself) keeps checkpoints small: restore() redraws the same permutation.
#include "sgd/sampler.h"

#include <string>

#include "common/check.h"

namespace gossip::sgd {

BatchSampler::BatchSampler(std::vector<std::int64_t> shard, int batch_size, std::uint64_t seed,
                           std::uint64_t node)
    : shard_(std::move(shard)), batch_size_(batch_size), rng_(mix_seed(seed, node)) {
  GOSSIP_CHECK(!shard_.empty()) << "BatchSampler needs a non-empty shard";
  GOSSIP_CHECK_GT(batch_size_, 0);
  batch_.resize(batch_size_);
  start_epoch();
}

void BatchSampler::start_epoch() {
  epoch_rng_state_ = rng_.state();
  perm_ = shard_;
  rng_.shuffle(std::span<std::int64_t>(perm_));
  position_ = 0;
}

std::span<const std::int64_t> BatchSampler::next() {
  for (int k = 0; k < batch_size_; ++k) {
    if (position_ == perm_.size()) {
      ++epoch_;
      start_epoch();
    }
    batch_[k] = perm_[position_++];
  }
  ++batches_;
  return batch_;
}

SamplerState BatchSampler::state() const {
  return SamplerState{epoch_rng_state_, epoch_, position_, batches_};
}

Status BatchSampler::restore(const SamplerState& state) {
  if (state.position > shard_.size()) {
    return invalid_argument("sampler state: position " + std::to_string(state.position) +
                            " is beyond the shard size " + std::to_string(shard_.size()));
  }
  rng_.set_state(state.epoch_rng_state);
  start_epoch();
  epoch_ = state.epoch;
  position_ = state.position;
  batches_ = state.batches;
  return Status::ok();
}

}  // namespace gossip::sgd
