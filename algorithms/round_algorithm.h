// What the round algorithms of the node driver (daemon/algorithm.h) share: local-step gossip
// (algorithms/local_gossip.h) and DiLoCo (algorithms/diloco.h) both run rounds of H local steps
// (docs/design.md §1, "Local steps, the outer optimizer, compression") and keep, per node, the
// anchor a, the round's start s and the outer optimizer's momentum (sgd/round.h), plus state of
// their own. This base holds those, says which iterations end a round, and writes and reads the
// checkpoint state in the one layout both use:
//   a, s, the momentum, the algorithm's own vectors (checkpoint_also(), in its order), and, with
//   overlap, a flag: 1 when a round's exchange was in flight, else 0.
// A checkpoint written by state() is read back by load_state() of a node of the same config,
// topology and model size; it is the same bytes a job resumed from it writes at the same point.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "config/train_config.h"
#include "daemon/algorithm.h"
#include "sgd/round.h"

namespace gossip::algorithms {

class RoundAlgorithm : public daemon::Algorithm {
 public:
  RoundAlgorithm(const RoundAlgorithm&) = delete;
  RoundAlgorithm& operator=(const RoundAlgorithm&) = delete;

  // 2·num_params + the momentum + the own vectors + (overlap ? 1 : 0).
  std::size_t state_size() const final;
  std::vector<float> state() const final;
  // An error (failed precondition) when `state` holds another number of floats than state_size().
  Status load_state(std::span<const float> state) final;
  // Keeps `services` and `total` (services_, total_), then start_rounds().
  Result<std::uint64_t> start(std::uint64_t start, bool rejoining, std::uint64_t total,
                              daemon::RunServices& services, int* exit_code) final;

 protected:
  // Node `node` under `config` for a model of `num_params` floats; `attached`: the local step is
  // an external trainer, and every iteration of the driver is a whole round.
  RoundAlgorithm(int node, const config::TrainConfig& config, std::size_t num_params,
                 bool attached);

  // daemon::Algorithm::start, with services_ and total_ set.
  virtual Result<std::uint64_t> start_rounds(std::uint64_t start, bool rejoining,
                                             int* exit_code) = 0;
  // Adds `v`, a member of the algorithm, to its own checkpoint vectors: they follow the momentum
  // in the order added. Called from the constructor, with `v` at its final size.
  void checkpoint_also(std::vector<float>& v) { own_state_.push_back(&v); }
  // With overlap: whether a round's exchange is in flight (the flag state() writes; a resumed
  // exchange not yet sent again counts). load_state() sets resend_in_flight_ from the flag.
  virtual bool exchange_in_flight() const = 0;

  // Whether iteration t ends its round (the run's last iteration ends the last round).
  bool last_of_round(std::uint64_t t) const { return (t + 1) % per_round_ == 0 || t + 1 == total_; }

  const int self_;
  const sgd::RoundConfig round_;
  const std::size_t d_;
  const std::uint64_t per_round_;  // iterations per round: H, or 1 for an attached trainer
  daemon::RunServices* services_ = nullptr;
  std::uint64_t total_ = 0;
  std::vector<float> anchor_, start_, momentum_;
  bool start_known_ = false;       // start_ and anchor_ hold the run's
  bool resend_in_flight_ = false;  // resumed with round r−1's exchange in flight: start it again

 private:
  std::vector<std::vector<float>*> own_state_;  // checkpoint_also()
};

}  // namespace gossip::algorithms
