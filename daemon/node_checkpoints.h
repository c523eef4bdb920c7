// NodeCheckpoints: one node's checkpoints as its run sees them (daemon/checkpoint.h has the file
// format and the directory rules) — where the run starts (a fresh directory, the newest usable
// checkpoint, or exactly the one asked for) and writing the state at an iteration.
//
// The run owns the directory from open() (or its first save()) until it is destroyed: an exclusive
// DirectoryLock (daemon/dir_lock.h), shared with any other claim of the directory in this process
// (gossipd's start claims it before it loads data). Another process holding it: kExitUsage.
// Only after open() applied the start rules does save() move a stranger's same-named file aside
// (checkpoint.h, rule 5); a writer that never opened (ALLREDUCE) fails on it instead.
//
// Start rules (docs/daemon.md "Checkpoints and resume"):
//   no resume flag    the directory must hold no checkpoint files (another run's are never
//                     overwritten or deleted): kExitUsage otherwise;
//   --resume          the newest checkpoint that matches the node, config and topology; none:
//                     kExitCannotResume with the reason (starting from 0 would throw work away);
//   --resume-at N     exactly iteration N's checkpoint, else kExitCannotResume;
//   --resume-or-start as --resume, but with none usable the directory's files are set aside (kept)
//                     and the run starts from iteration 0.
// A run resumed at iteration k first moves every checkpoint file after k (damaged, another run's,
// its own abandoned ones) into set-aside-<run id>/, logging each and why (daemon/checkpoint.h,
// rule 3), so that nothing there can block the checkpoints it writes.
// A resumed run keeps the run id of the checkpoint it resumed; a new run gets a new one.
// A checkpoint never holds non-finite parameters (common/divergence.h): save() then returns
// kAborted and the previous checkpoint stays the newest.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "common/env.h"
#include "common/status.h"
#include "daemon/checkpoint.h"
#include "daemon/dir_lock.h"
#include "sgd/sampler.h"

namespace gossip::daemon {

struct CheckpointRequest {
  std::string dir;  // "" = no checkpoints
  bool resume = false;
  bool resume_or_start = false;
  std::optional<std::uint64_t> resume_at;
  std::uint32_t keep = 0;
};

class NodeCheckpoints {
 public:
  NodeCheckpoints(Env& env, CheckpointRequest request, CheckpointExpectation expect)
      : env_(env), request_(std::move(request)), expect_(std::move(expect)) {}

  // Applies the start rules. Returns the checkpoint to resume from (nullopt: start at 0); on
  // failure `exit_code` says which daemon exit code the failure maps to.
  Result<std::optional<Checkpoint>> open(int* exit_code);

  // Writes the state at the start of `iteration` (nothing without a directory).
  Status save(std::uint64_t iteration, std::vector<float> params, const sgd::SamplerState& sampler,
              std::vector<float> optimizer_state);

  bool enabled() const { return !request_.dir.empty(); }
  const std::string& dir() const { return request_.dir; }
  const std::string& run_id() const { return run_id_; }

 private:
  Env& env_;
  CheckpointRequest request_;
  CheckpointExpectation expect_;
  std::string run_id_ = new_run_id();
  std::shared_ptr<DirectoryLock> lock_;  // this run's hold on request_.dir (null before open)
  bool opened_ = false;  // open() applied the start rules: this run owns what it writes there

  Status claim();
  std::string holder() const;
  // open()'s end when `c` is usable: adopt its run, set aside what follows it.
  Result<std::optional<Checkpoint>> resume_from(Checkpoint c, int* exit_code);
};

// The batch sampler's state in a checkpoint, and back.
SamplerSnapshot to_snapshot(const sgd::SamplerState& state);
sgd::SamplerState from_snapshot(const SamplerSnapshot& snapshot);

}  // namespace gossip::daemon
