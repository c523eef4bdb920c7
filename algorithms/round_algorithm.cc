// The round algorithms' shared state and checkpoint layout (see round_algorithm.h). The layout is
// the one local-step gossip and DiLoCo each wrote before they shared it: checkpoints of either
// stay readable, and the resume tests (tests/daemon/gossipd_rounds_test.cc) compare the bytes.
#include "algorithms/round_algorithm.h"

#include <algorithm>
#include <string>

#include "config/sgd_config.h"

namespace gossip::algorithms {

RoundAlgorithm::RoundAlgorithm(int node, const config::TrainConfig& config, std::size_t num_params,
                               bool attached)
    : self_(node),
      round_(config::to_round_config(config)),
      d_(num_params),
      per_round_(attached ? 1 : static_cast<std::uint64_t>(round_.local_steps)),
      anchor_(num_params),
      start_(num_params),
      momentum_(round_.outer.state_size(num_params)) {}

std::size_t RoundAlgorithm::state_size() const {
  std::size_t floats = anchor_.size() + start_.size() + momentum_.size();
  for (const std::vector<float>* v : own_state_) floats += v->size();
  return floats + (round_.overlap ? 1 : 0);
}

std::vector<float> RoundAlgorithm::state() const {
  std::vector<float> out;
  out.reserve(state_size());
  out.insert(out.end(), anchor_.begin(), anchor_.end());
  out.insert(out.end(), start_.begin(), start_.end());
  out.insert(out.end(), momentum_.begin(), momentum_.end());
  for (const std::vector<float>* v : own_state_) out.insert(out.end(), v->begin(), v->end());
  if (round_.overlap) out.push_back(exchange_in_flight() ? 1.0f : 0.0f);
  return out;
}

Status RoundAlgorithm::load_state(std::span<const float> state) {
  if (state.size() != state_size()) {
    return failed_precondition("the checkpoint holds " + std::to_string(state.size()) +
                               " floats of " + std::string(name()) + " state, this job " +
                               std::to_string(state_size()));
  }
  auto take = [&state](std::span<float> v) {
    std::copy(state.begin(), state.begin() + static_cast<std::ptrdiff_t>(v.size()), v.begin());
    state = state.subspan(v.size());
  };
  take(anchor_);
  take(start_);
  take(momentum_);
  for (std::vector<float>* v : own_state_) take(*v);
  start_known_ = true;
  if (round_.overlap) resend_in_flight_ = state[0] != 0.0f;
  return Status::ok();
}

Result<std::uint64_t> RoundAlgorithm::start(std::uint64_t start, bool rejoining,
                                            std::uint64_t total, daemon::RunServices& services,
                                            int* exit_code) {
  services_ = &services;
  total_ = total;
  return start_rounds(start, rejoining, exit_code);
}

}  // namespace gossip::algorithms
