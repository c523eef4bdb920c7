// NodeCheckpoints (see node_checkpoints.h).
#include "daemon/node_checkpoints.h"

#include <utility>

#include "common/divergence.h"
#include "common/log.h"
#include "daemon/exit_codes.h"
#include "daemon/outputs.h"

namespace gossip::daemon {

SamplerSnapshot to_snapshot(const sgd::SamplerState& state) {
  SamplerSnapshot s;
  s.rng_state = state.epoch_rng_state;
  s.epoch = state.epoch;
  s.position = state.position;
  s.batches = state.batches;
  return s;
}

sgd::SamplerState from_snapshot(const SamplerSnapshot& snapshot) {
  sgd::SamplerState s;
  s.epoch_rng_state = snapshot.rng_state;
  s.epoch = snapshot.epoch;
  s.position = snapshot.position;
  s.batches = snapshot.batches;
  return s;
}

std::string NodeCheckpoints::holder() const {
  return "gossipd node " + std::to_string(expect_.node) + ", run " + run_id_;
}

Status NodeCheckpoints::claim() {
  if (lock_ != nullptr) return Status::ok();
  GOSSIP_ASSIGN_OR_RETURN(lock_, claim_checkpoint_dir(request_.dir, holder()));
  lock_->set_holder(holder());
  return Status::ok();
}

Result<std::optional<Checkpoint>> NodeCheckpoints::resume_from(Checkpoint c, int* exit_code) {
  if (!c.run_id.empty()) run_id_ = c.run_id;
  lock_->set_holder(holder());
  // Rule 3 (checkpoint.h): the iterations after the resumed one are this run's to write.
  Result<std::vector<SetAside>> moved =
      set_aside_after(env_, request_.dir, c.iteration, expect_, run_id_);
  if (!moved.is_ok()) {
    *exit_code = kExitError;
    return moved.status().with_context("setting aside the checkpoints after iteration " +
                                       std::to_string(c.iteration));
  }
  for (const SetAside& m : *moved) {
    GOSSIP_LOG(kWarning) << "set aside " << m.from << " as " << m.to << ", " << m.reason;
  }
  GOSSIP_LOG(kInfo) << "resumed from checkpoint at iteration " << c.iteration << " in "
                    << request_.dir << " (run " << run_id_ << ")";
  opened_ = true;
  return std::optional<Checkpoint>(std::move(c));
}

Result<std::optional<Checkpoint>> NodeCheckpoints::open(int* exit_code) {
  const CheckpointRequest& r = request_;
  const bool resuming = r.resume || r.resume_or_start || r.resume_at;
  if (r.dir.empty()) return std::optional<Checkpoint>();
  // Rule 1 (checkpoint.h): the directory is this run's before anything in it is read.
  if (Status s = claim(); !s.is_ok()) {
    *exit_code = kExitUsage;
    return s;
  }
  if (!resuming) {
    if (Status s = check_fresh_directory(env_, r.dir); !s.is_ok()) {
      *exit_code = kExitUsage;
      return s;
    }
    opened_ = true;
    return std::optional<Checkpoint>();
  }
  std::vector<std::string> skipped;
  Result<Checkpoint> c =
      r.resume_at
          ? load_checkpoint_file(env_, r.dir + "/" + checkpoint_file_name(*r.resume_at), expect_)
          : load_latest_checkpoint(env_, r.dir, expect_, &skipped);
  if (c.is_ok()) return resume_from(std::move(*c), exit_code);
  if (r.resume_at || !r.resume_or_start) {
    // Starting from 0 instead would silently throw away the work the user asked to continue.
    std::string why = c.status().to_string();
    if (!skipped.empty()) {
      why += " (" + std::to_string(skipped.size()) +
             " checkpoint file(s) skipped as damaged or written for another config, topology or "
             "node; see the warnings above)";
    }
    *exit_code = kExitCannotResume;
    return failed_precondition(why + "; give --resume-or-start to start from iteration 0 instead")
        .with_context(r.resume_at ? "--resume-at" : "--resume");
  }
  // The unusable files are another run's: set aside (kept), so this run owns the directory.
  Result<std::string> aside = set_aside_checkpoints(env_, r.dir, run_id_);
  if (!aside.is_ok()) {
    *exit_code = kExitError;
    return aside.status().with_context("--resume-or-start");
  }
  GOSSIP_LOG(kWarning) << "--resume-or-start: no usable checkpoint in " << r.dir
                       << "; starting from iteration 0 (run " << run_id_ << ")"
                       << (aside->empty() ? std::string()
                                          : "; the unusable files were moved to " + *aside);
  opened_ = true;
  return std::optional<Checkpoint>();
}

Status NodeCheckpoints::save(std::uint64_t iteration, std::vector<float> params,
                             const sgd::SamplerState& sampler, std::vector<float> optimizer_state) {
  if (request_.dir.empty()) return Status::ok();
  // Never checkpoint a diverged model (common/divergence.h): the previous checkpoint stays the
  // newest one.
  if (!all_finite(params)) {
    return diverged(static_cast<std::int64_t>(iteration),
                    "the parameters contain NaN or Inf (not checkpointed)");
  }
  Checkpoint c;
  c.node = expect_.node;
  c.iteration = iteration;
  c.topology_fingerprint = expect_.topology_fingerprint;
  c.config_fingerprint = expect_.config_fingerprint;
  c.run_id = run_id_;
  c.sampler = to_snapshot(sampler);
  c.params = std::move(params);
  c.optimizer_state = std::move(optimizer_state);
  // A writer that never opened (ALLREDUCE) claims the directory at its first checkpoint, but it
  // did not apply the start rules there, so it moves nothing aside (rule 5: it fails instead).
  GOSSIP_RETURN_IF_ERROR(claim());
  Result<std::string> path = write_checkpoint(env_, request_.dir, c, request_.keep, opened_);
  if (!path.is_ok()) return path.status();
  GOSSIP_LOG(kDebug) << "checkpoint " << *path;
  return Status::ok();
}

}  // namespace gossip::daemon
