// The divergence rule shared by gossipd and gossip-sim: a run whose loss or parameters are not
// finite (NaN or Inf) has diverged. It stops at once with an Aborted status (exit code
// kExitDiverged = 5, common/cli.h and daemon/exit_codes.h) and never writes the non-finite
// parameters anywhere (no checkpoint, no final parameters): the last checkpoint written before
// the divergence is the one to go back to, with a lower learning rate.
#pragma once

#include <cmath>
#include <cstdint>
#include <span>
#include <string>

#include "common/status.h"

namespace gossip {

inline bool all_finite(std::span<const float> x) {
  bool ok = true;
  for (float v : x) ok &= std::isfinite(v);
  return ok;
}

// "training diverged at iteration 93: the loss is nan; lower the learning rate ..."
inline Status diverged(std::int64_t iteration, const std::string& what) {
  return aborted("training diverged at iteration " + std::to_string(iteration) + ": " + what +
                 "; lower the learning rate (or resume from an earlier checkpoint with a lower "
                 "one)");
}

}  // namespace gossip
