// Checkpoints of one gossipd node: everything needed to continue a run exactly where it stopped.
//
// File format (version 2, little-endian; every size is stated before the data it sizes):
//
//   offset  size  field
//   0       8     magic "GSPCKPT\0"
//   8       4     version (uint32) — files with a version newer than kCheckpointVersion are skipped
//   12      4     node id (uint32)
//   16      8     total file size in bytes (uint64), so truncation is detected before parsing
//   24      8     iteration: number of completed iterations (the next one to run)
//   32      8     num_params (uint64)
//   40      8     num_optimizer_state floats (uint64)
//   48      4+L   topology fingerprint (uint32 length, bytes)
//   ..      4+L   config fingerprint (uint32 length, bytes)
//   ..      4+L   run id (uint32 length, bytes; version 2 — absent, read as "", in version 1)
//   ..      56    sampler state: 4 × uint64 generator state, then epoch, position, batches
//                 (uint64 each) — see SamplerSnapshot
//   ..      4·P   parameters x (float32)
//   ..      4·S   optimizer state (float32; e.g. momentum buffer)
//   end-4   4     CRC-32 (zlib) of every byte before it
//
// Files are named ckpt-<iteration, 12 digits>.bin inside a node's directory and written with
// Env::write_file_atomic (temporary file, fsync, rename, directory fsync), so a crash leaves the
// previous checkpoint intact; a leftover ".tmp" is never read. load_latest_checkpoint() tries the
// newest first and skips any file that is truncated, has a wrong magic, a future version, a bad
// checksum or the wrong shape, logging a warning for each.
//
// Checkpoints are a run's property. A run is identified by its run id (random, made when a node
// starts from iteration 0, inherited when it resumes from a checkpoint) together with the
// config and topology fingerprints. The rules, which never lose a file another run could resume
// from (docs/fault.md, "Directory ownership" and "Damaged files on resume"):
//  1. A run owns its node's directory for its whole life (daemon/dir_lock.h: an exclusive lock on
//     dir/LOCK, taken before anything is read or written there); a second process is refused.
//  2. A fresh run refuses a directory that already holds checkpoint files (check_fresh_directory),
//     so it can neither delete an earlier run's checkpoints nor have its own mistaken for theirs.
//  3. A run resuming at iteration k moves aside (set_aside_after) every checkpoint file at an
//     iteration after k — damaged or unreadable, of a future version, written for another config,
//     its own abandoned later ones, another run's — into dir/set-aside-<run id>/, logging each and
//     why: the iterations after k are the ones it is about to write, and none of those files may
//     block it or be resumed from in place of what it writes.
//  4. write_checkpoint only ever deletes older checkpoints that carry its own run id. Files of
//     another run, files it cannot read, and files of its own run at later iterations are never
//     deleted, so the file just written always survives.
//  5. A file of the same name that is not the run's own is never replaced: the directory's owner
//     moves it aside (kept, rule 3's directory) before writing; a writer that does not own the
//     directory fails with FailedPrecondition.
// --resume-or-start with nothing usable moves every checkpoint file aside (set_aside_checkpoints)
// and starts from 0 as a fresh run. Nothing here ever deletes or overwrites a valid checkpoint of
// another run; "set aside" is a rename within the directory, undone with mv.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "common/env.h"
#include "common/status.h"

namespace gossip::daemon {

inline constexpr std::uint32_t kCheckpointVersion = 2;
inline constexpr char kCheckpointMagic[8] = {'G', 'S', 'P', 'C', 'K', 'P', 'T', '\0'};

// The batch sampler's state (mirrors sgd::SamplerState without depending on its header).
struct SamplerSnapshot {
  std::array<std::uint64_t, 4> rng_state{};
  std::uint64_t epoch = 0;
  std::uint64_t position = 0;
  std::uint64_t batches = 0;
  bool operator==(const SamplerSnapshot&) const = default;
};

struct Checkpoint {
  std::uint32_t node = 0;
  std::uint64_t iteration = 0;  // completed iterations; training resumes at this iteration
  std::string topology_fingerprint;
  std::string config_fingerprint;
  std::string run_id;  // at most 64 bytes; "" for version-1 files
  SamplerSnapshot sampler;
  std::vector<float> params;
  std::vector<float> optimizer_state;
};

// What a loaded checkpoint must match to be usable (empty fields are not checked; num_params 0
// skips both size checks).
struct CheckpointExpectation {
  std::uint32_t node = 0;
  std::uint64_t num_params = 0;
  std::uint64_t num_optimizer_state = 0;
  std::string topology_fingerprint;
  std::string config_fingerprint;
};

std::string encode_checkpoint(const Checkpoint& checkpoint);
// Corruption for anything malformed (magic, size, checksum, lengths); FailedPrecondition for a
// version newer than this build understands. `name` prefixes messages.
Result<Checkpoint> decode_checkpoint(std::string_view bytes, const std::string& name);

// "ckpt-000000001200.bin".
std::string checkpoint_file_name(std::uint64_t iteration);

// A new run id: 16 hex digits from the system's random source.
std::string new_run_id();

// Writes dir/ckpt-<iteration>.bin atomically (creating dir), then deletes the checkpoints of the
// same run (same run_id) at earlier iterations beyond the newest `keep` (the one just written
// counts). Files of other runs, unreadable files and later iterations are never deleted. A file
// of the same name is replaced only when it carries the same run id; otherwise, when the caller
// owns the directory (`owns_directory`: it holds its DirectoryLock) that file is moved into
// dir/set-aside-<run id>/ first, and when it does not the write fails (FailedPrecondition).
// Returns the path written.
Result<std::string> write_checkpoint(Env& env, const std::string& dir, const Checkpoint& checkpoint,
                                     std::uint32_t keep, bool owns_directory = false);

// Reads and checks one checkpoint file against `expect` (FailedPrecondition on a mismatch).
Result<Checkpoint> load_checkpoint_file(Env& env, const std::string& path,
                                        const CheckpointExpectation& expect);

// OK when `dir` holds no checkpoint files (or does not exist); otherwise FailedPrecondition
// naming the directory and the iterations found, for a run that starts from iteration 0.
Status check_fresh_directory(Env& env, const std::string& dir);

// Moves every checkpoint file of `dir` into the subdirectory dir/set-aside-<tag>/ (nothing is
// deleted; a name already taken there gets a suffix .1, .2, ...), so that a run starting from
// iteration 0 there (--resume-or-start with no usable checkpoint) owns the directory. Returns the
// subdirectory, or "" when there was nothing to move.
Result<std::string> set_aside_checkpoints(Env& env, const std::string& dir, const std::string& tag);

// A checkpoint file moved aside: where it was, where it is now, and why it was in the way.
struct SetAside {
  std::string from;
  std::string to;
  std::string reason;
};

// Rule 3 above, for a run (id `run_id`) resuming at `iteration` in `dir`: moves every checkpoint
// file at a later iteration into dir/set-aside-<run_id>/ and says why for each (read against
// `expect`: damaged, another config's, this run's own, another run's).
Result<std::vector<SetAside>> set_aside_after(Env& env, const std::string& dir,
                                              std::uint64_t iteration,
                                              const CheckpointExpectation& expect,
                                              const std::string& run_id);

// Newest valid checkpoint in `dir` that meets `expect`; files that fail are skipped with a warning
// (and listed in *skipped when given). NotFound when there is none (or no directory).
Result<Checkpoint> load_latest_checkpoint(Env& env, const std::string& dir,
                                          const CheckpointExpectation& expect,
                                          std::vector<std::string>* skipped = nullptr);

}  // namespace gossip::daemon
