// Every file and directory a gossipd run will write, named and checked before it trains, so that
// an output it could not write is refused at once (exit 2, naming the field or flag and the path)
// instead of after the connect wait or after the whole run (docs/fault.md, "Outputs checked at
// start").
//
// A run's outputs (RunOutputs, from the training config and the command line by run_outputs):
//   checkpoint.dir/node-<id>/   its checkpoints (and, by default, its metrics file)
//   the metrics file            --metrics, else metrics_path, else <node dir>/metrics.jsonl;
//                               "-" is standard output
//   --dump-params DIR           DIR/node_<id>.f32 at the end
//   final_params_path           "{node}" replaced by the node's id, at the end
//
// check_outputs proves a directory writable by creating and removing a probe file in it
// (permission bits do not tell: root, read-only mounts, ACLs). The checkpoint directory and the
// metrics file's directory are created (the run writes there from its start); the directories of
// the parameter files written at the end are not: where one does not exist yet, its nearest
// existing ancestor must be a directory that takes the probe, so a run that ends early (diverged,
// stopped) leaves nothing behind and nodes checking one shared directory never race. A
// file the run replaces at the end (the parameter files) must be a regular file or not exist —
// Env::write_file_atomic never replaces anything else (a device such as /dev/null, a directory, a
// FIFO, a symbolic link). The metrics file is streamed, not replaced: it may also be a FIFO or a
// character device (/dev/stderr), but not a directory, and it must be writable; it is never opened
// here (opening would truncate another run's file or block on a FIFO).
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "common/status.h"
#include "config/train_config.h"
#include "daemon/dir_lock.h"

namespace gossip::daemon {

struct RunOutputs {
  int node_id = 0;
  std::string checkpoint_dir;     // this node's checkpoint directory ("" none)
  std::string metrics_path;       // "" none, "-" standard output
  std::string metrics_field;      // what set metrics_path: "--metrics", "metrics_path", or
                                  // "checkpoint.dir" (the default inside the node's directory)
  std::string dump_params_dir;    // --dump-params ("" none)
  std::string final_params_path;  // final_params_path with {node} replaced ("" none)
};

// `dir`/node-<node_id>: a node's own checkpoint directory under checkpoint.dir.
std::string node_checkpoint_dir(const std::string& dir, int node_id);
// `pattern` with every "{node}" replaced by `node_id` (the config's final_params_path).
std::string final_params_path_for(std::string pattern, int node_id);
// --dump-params DIR's file: DIR/node_<node_id>.f32.
std::string dump_params_file(const std::string& dir, int node_id);

// The outputs of node `node_id` of a job with `config`, given gossipd run's --metrics and
// --dump-params values ("" when not given).
RunOutputs run_outputs(const config::TrainConfig& config, int node_id,
                       const std::string& metrics_flag, const std::string& dump_params_dir);

// Creates `dir` and its parents. PermissionDenied (EACCES, EPERM, EROFS) or InvalidArgument (a
// parent that is a file, a name too long, ...) naming the directory; InvalidArgument when `dir`
// exists and is not a directory.
Status create_output_dir(const std::string& dir);

// Checks every output of `outputs` (rules above). The error names the field or flag and the path:
// PermissionDenied when the file system refuses, InvalidArgument for anything else (a device, a
// directory or a FIFO where a file is replaced, a path under a regular file).
Status check_outputs(const RunOutputs& outputs);

// DirectoryLock::claim of a node's checkpoint directory, its refusal completed with what to do
// (another checkpoint.dir, or stop the other run) and blamed on checkpoint.dir.
Result<std::shared_ptr<DirectoryLock>> claim_checkpoint_dir(const std::string& dir,
                                                            std::string_view holder);

// gossipd run's start: claims the node's checkpoint directory for this process (DirectoryLock,
// holder line `holder`); for a run from iteration 0 (`fresh_run`) checks that it holds no
// checkpoint files (check_fresh_directory); then check_outputs. Returns the lock (null without a
// checkpoint directory), to be kept until the process ends. Every error is a usage error (exit 2):
// another process holding the directory (FailedPrecondition naming it and the holder), earlier
// checkpoints in a fresh run's directory, an output that cannot be written.
Result<std::shared_ptr<DirectoryLock>> claim_outputs(const RunOutputs& outputs, bool fresh_run,
                                                     std::string_view holder);

}  // namespace gossip::daemon
