// The node driver: the one training loop of a gossipd node, for every algorithm
// (docs/design.md §2). It owns what all algorithms share and calls the algorithm
// (daemon/algorithm.h) once per iteration:
//
//   start: the checkpoint resumed (x, the local step's optimizer state and batch position, the
//          algorithm's state), the metrics file, Algorithm::start (a rejoin may jump ahead),
//          LocalStep::start (an attached trainer's WELCOME);
//   iteration t: a stop request ends the run with a checkpoint of x_t (kExitStopped);
//          LocalStep::begin; Algorithm::iterate; the iteration's metrics; a non-finite training
//          loss ends the run with kExitDiverged and nothing written; LocalStep::end; every
//          eval_every iterations the model is evaluated, every checkpoint.every a checkpoint is
//          written (a failed periodic checkpoint is logged and training goes on);
//   end:   the final evaluation, checkpoint, parameter files (--dump-params, final_params_path)
//          and the metrics file's status.
//
// A checkpoint holds x, the step's optimizer state followed by the algorithm's state, and the
// batch position at the start of the iteration it is taken at. Timings come from the injected
// clock (Env::clock). Used from one thread; `stop` may be set from a signal handler.
#pragma once

#include <atomic>
#include <cstdint>

#include "common/env.h"
#include "daemon/algorithm.h"
#include "daemon/node.h"
#include "sgd/backend.h"

namespace gossip::daemon {

// Runs `job` from `start` to its end (or a failure or stop) with `algorithm`; `backend` holds the
// parameter buffers. Every argument is borrowed for the call.
NodeResult drive_node(const NodeOptions& options, NodeJob& job, NodeStart& start,
                      sgd::Backend& backend, Algorithm& algorithm, const std::vector<int>& senders,
                      const std::atomic<bool>& stop, Env& env = Env::system());

}  // namespace gossip::daemon
