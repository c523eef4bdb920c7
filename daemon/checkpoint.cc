// Checkpoint encoding and the resume scan. Little-endian is written explicitly byte by byte so
// the format does not depend on the host; CRC-32 comes from zlib (already a dependency for gzip).
#include "daemon/checkpoint.h"

#include <zlib.h>

#include <algorithm>
#include <bit>
#include <cstdio>
#include <cstring>
#include <random>

#include "common/little_endian.h"
#include "common/log.h"

namespace gossip::daemon {
namespace {

constexpr std::size_t kHeaderBytes = 48;

class Writer {
 public:
  void u32(std::uint32_t v) {
    out_.resize(out_.size() + 4);
    put_u32(out_.data() + out_.size() - 4, v);
  }
  void u64(std::uint64_t v) {
    out_.resize(out_.size() + 8);
    put_u64(out_.data() + out_.size() - 8, v);
  }
  void bytes(std::string_view s) { out_.append(s); }
  void str(std::string_view s) {
    u32(static_cast<std::uint32_t>(s.size()));
    bytes(s);
  }
  void floats(const std::vector<float>& v) {
    for (float f : v) u32(std::bit_cast<std::uint32_t>(f));
  }
  std::string& out() { return out_; }

 private:
  std::string out_;
};

class Reader {
 public:
  explicit Reader(std::string_view in) : in_(in) {}
  bool u32(std::uint32_t& v) {
    if (in_.size() - pos_ < 4) return false;
    v = get_u32(in_.data() + pos_);
    pos_ += 4;
    return true;
  }
  bool u64(std::uint64_t& v) {
    if (in_.size() - pos_ < 8) return false;
    v = get_u64(in_.data() + pos_);
    pos_ += 8;
    return true;
  }
  bool str(std::string& s, std::uint32_t max_len) {
    std::uint32_t n = 0;
    if (!u32(n) || n > max_len || in_.size() - pos_ < n) return false;
    s.assign(in_.substr(pos_, n));
    pos_ += n;
    return true;
  }
  bool floats(std::vector<float>& v, std::uint64_t n) {
    if ((in_.size() - pos_) / 4 < n) return false;
    v.resize(n);
    for (std::uint64_t i = 0; i < n; ++i) {
      std::uint32_t bits = 0;
      u32(bits);
      v[i] = std::bit_cast<float>(bits);
    }
    return true;
  }
  std::size_t pos() const { return pos_; }

 private:
  std::string_view in_;
  std::size_t pos_ = 0;
};

std::uint32_t crc32_of(std::string_view bytes) {
  uLong crc = crc32(0L, Z_NULL, 0);
  // zlib takes uInt lengths: feed large buffers in pieces.
  while (!bytes.empty()) {
    std::size_t n = std::min<std::size_t>(bytes.size(), 1u << 30);
    crc = crc32(crc, reinterpret_cast<const Bytef*>(bytes.data()), static_cast<uInt>(n));
    bytes.remove_prefix(n);
  }
  return static_cast<std::uint32_t>(crc);
}

// Iteration number from "ckpt-<digits>.bin", or -1.
std::int64_t parse_file_name(const std::string& name) {
  constexpr std::string_view kPrefix = "ckpt-", kSuffix = ".bin";
  if (name.size() <= kPrefix.size() + kSuffix.size() || name.rfind(kPrefix, 0) != 0 ||
      name.compare(name.size() - kSuffix.size(), kSuffix.size(), kSuffix) != 0) {
    return -1;
  }
  std::string digits = name.substr(kPrefix.size(), name.size() - kPrefix.size() - kSuffix.size());
  if (digits.empty() || digits.size() > 18 ||
      !std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    return -1;
  }
  return std::stoll(digits);
}

// Checkpoint files of `dir`, newest first.
std::vector<std::pair<std::int64_t, std::string>> list_checkpoints(Env& env,
                                                                   const std::string& dir) {
  std::vector<std::pair<std::int64_t, std::string>> files;
  Result<std::vector<std::string>> names = env.list_dir(dir);
  if (!names.is_ok()) return files;
  for (const std::string& name : *names) {
    std::int64_t it = parse_file_name(name);
    if (it >= 0) files.emplace_back(it, name);
  }
  std::sort(files.begin(), files.end(),
            [](const auto& a, const auto& b) { return a.first > b.first; });
  return files;
}

// The run id in a checkpoint's header, read from the first bytes only (no checksum: a file whose
// header cannot be read gives "", which never matches a run and so is never deleted).
std::string read_run_id(Env& env, const std::string& path) {
  Result<std::string> head = env.read_file_head(path, 4096);
  if (!head.is_ok() || head->size() < kHeaderBytes ||
      std::memcmp(head->data(), kCheckpointMagic, 8) != 0) {
    return "";
  }
  Reader r(std::string_view(*head).substr(8));
  std::uint32_t version = 0, node = 0;
  std::uint64_t skip = 0;
  std::string fingerprint, run_id;
  if (!r.u32(version) || version < 2 || version > kCheckpointVersion || !r.u32(node) ||
      !r.u64(skip) || !r.u64(skip) || !r.u64(skip) || !r.u64(skip) || !r.str(fingerprint, 1024) ||
      !r.str(fingerprint, 1024) || !r.str(run_id, 64)) {
    return "";
  }
  return run_id;
}

// Moves dir/name into dir/set-aside-<tag>/ under the same name, or name.1, name.2, ... when that
// is taken (a run may set files of one name aside more than once). Returns the new path.
Result<std::string> move_aside(Env& env, const std::string& dir, const std::string& name,
                               const std::string& tag) {
  const std::string aside = dir + "/set-aside-" + tag;
  GOSSIP_RETURN_IF_ERROR(env.create_dirs(aside));
  std::string to = aside + "/" + name;
  for (int k = 1; env.file_exists(to); ++k) to = aside + "/" + name + "." + std::to_string(k);
  GOSSIP_RETURN_IF_ERROR(env.rename_file(dir + "/" + name, to));
  return to;
}

}  // namespace

std::string encode_checkpoint(const Checkpoint& c) {
  Writer w;
  w.bytes(std::string_view(kCheckpointMagic, 8));
  w.u32(kCheckpointVersion);
  w.u32(c.node);
  w.u64(0);  // total size, patched below
  w.u64(c.iteration);
  w.u64(c.params.size());
  w.u64(c.optimizer_state.size());
  w.str(c.topology_fingerprint);
  w.str(c.config_fingerprint);
  w.str(c.run_id);
  for (std::uint64_t s : c.sampler.rng_state) w.u64(s);
  w.u64(c.sampler.epoch);
  w.u64(c.sampler.position);
  w.u64(c.sampler.batches);
  w.floats(c.params);
  w.floats(c.optimizer_state);
  std::string& out = w.out();
  std::uint64_t total = out.size() + 4;
  put_u64(out.data() + 16, total);
  std::uint32_t crc = crc32_of(out);
  w.u32(crc);
  return std::move(out);
}

Result<Checkpoint> decode_checkpoint(std::string_view bytes, const std::string& name) {
  if (bytes.size() < kHeaderBytes + 4) {
    return corruption(name + ": truncated checkpoint (" + std::to_string(bytes.size()) +
                      " bytes, shorter than the header)");
  }
  if (std::memcmp(bytes.data(), kCheckpointMagic, 8) != 0) {
    return corruption(name + ": not a gossipd checkpoint (wrong magic number)");
  }
  Reader r(bytes.substr(8));
  std::uint32_t version = 0, node = 0;
  std::uint64_t total = 0;
  r.u32(version);
  r.u32(node);
  r.u64(total);
  if (version == 0 || version > kCheckpointVersion) {
    return failed_precondition(name + ": checkpoint version " + std::to_string(version) +
                               " is not supported by this build (supports 1.." +
                               std::to_string(kCheckpointVersion) + ")");
  }
  if (total != bytes.size()) {
    return corruption(name + ": truncated or extended checkpoint (header says " +
                      std::to_string(total) + " bytes, file has " + std::to_string(bytes.size()) +
                      ")");
  }
  std::uint32_t stored_crc = 0;
  Reader tail(bytes.substr(bytes.size() - 4));
  tail.u32(stored_crc);
  if (crc32_of(bytes.substr(0, bytes.size() - 4)) != stored_crc) {
    return corruption(name + ": checksum mismatch (the file is damaged)");
  }
  Checkpoint c;
  c.node = node;
  std::uint64_t num_params = 0, num_state = 0;
  bool ok = r.u64(c.iteration) && r.u64(num_params) && r.u64(num_state) &&
            r.str(c.topology_fingerprint, 1024) && r.str(c.config_fingerprint, 1024) &&
            (version < 2 || r.str(c.run_id, 64));
  for (std::uint64_t& s : c.sampler.rng_state) ok = ok && r.u64(s);
  ok = ok && r.u64(c.sampler.epoch) && r.u64(c.sampler.position) && r.u64(c.sampler.batches);
  std::size_t consumed = 8 + r.pos();
  std::size_t remaining = bytes.size() - 4 - consumed;
  if (!ok || num_params > remaining / 4 || num_state > remaining / 4 ||
      (num_params + num_state) * 4 != remaining) {
    return corruption(name + ": inconsistent lengths in checkpoint header");
  }
  Reader data(bytes.substr(consumed, remaining));
  data.floats(c.params, num_params);
  data.floats(c.optimizer_state, num_state);
  return c;
}

std::string checkpoint_file_name(std::uint64_t iteration) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "ckpt-%012llu.bin", static_cast<unsigned long long>(iteration));
  return buf;
}

std::string new_run_id() {
  std::random_device rd;
  const std::uint64_t v = (std::uint64_t{rd()} << 32) ^ rd();
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

Result<std::string> write_checkpoint(Env& env, const std::string& dir, const Checkpoint& checkpoint,
                                     std::uint32_t keep, bool owns_directory) {
  GOSSIP_RETURN_IF_ERROR(env.create_dirs(dir).with_context("creating checkpoint directory " + dir));
  const std::string name = checkpoint_file_name(checkpoint.iteration);
  std::string path = dir + "/" + name;
  // A file of the same name that this run did not write (another run's, or one whose header
  // cannot be read) is not ours to replace: the owner of the directory moves it aside (kept),
  // anybody else leaves it alone and fails.
  if (env.file_exists(path) &&
      (checkpoint.run_id.empty() || read_run_id(env, path) != checkpoint.run_id)) {
    if (!owns_directory) {
      return failed_precondition(path +
                                 " belongs to another run (or is damaged); not replacing it");
    }
    const std::string tag = checkpoint.run_id.empty() ? new_run_id() : checkpoint.run_id;
    GOSSIP_ASSIGN_OR_RETURN(std::string moved, move_aside(env, dir, name, tag));
    GOSSIP_LOG(kWarning) << path << " was not written by this run (" << checkpoint.run_id
                         << "); moved to " << moved << " before writing this run's checkpoint";
  }
  GOSSIP_RETURN_IF_ERROR(env.write_file_atomic(path, encode_checkpoint(checkpoint))
                             .with_context("writing checkpoint " + path));
  // Older checkpoints of this run, newest first (list_checkpoints' order).
  std::size_t kept = 1;  // the one just written
  for (const auto& [iteration, name] : list_checkpoints(env, dir)) {
    if (iteration < 0 || static_cast<std::uint64_t>(iteration) >= checkpoint.iteration) continue;
    if (read_run_id(env, dir + "/" + name) != checkpoint.run_id || checkpoint.run_id.empty()) {
      continue;
    }
    if (kept < std::max<std::uint32_t>(keep, 1)) {
      ++kept;
      continue;
    }
    Status s = env.remove_file(dir + "/" + name);
    if (!s.is_ok()) {
      GOSSIP_LOG(kWarning) << "could not remove old checkpoint: " << s.to_string();
    }
  }
  return path;
}

Status check_fresh_directory(Env& env, const std::string& dir) {
  auto files = list_checkpoints(env, dir);
  if (files.empty()) return Status::ok();
  return failed_precondition(
      dir + " already holds " + std::to_string(files.size()) + " checkpoint file(s) (iterations " +
      std::to_string(files.back().first) + ".." + std::to_string(files.front().first) +
      ") of an earlier run; a new run never deletes them: continue that run with --resume, or give "
      "another checkpoint.dir, or remove the files");
}

Result<std::string> set_aside_checkpoints(Env& env, const std::string& dir,
                                          const std::string& tag) {
  auto files = list_checkpoints(env, dir);
  if (files.empty()) return std::string();
  for (const auto& entry : files) {
    GOSSIP_RETURN_IF_ERROR(move_aside(env, dir, entry.second, tag).status());
  }
  return dir + "/set-aside-" + tag;
}

Result<std::vector<SetAside>> set_aside_after(Env& env, const std::string& dir,
                                              std::uint64_t iteration,
                                              const CheckpointExpectation& expect,
                                              const std::string& run_id) {
  std::vector<SetAside> moved;
  for (const auto& [it, name] : list_checkpoints(env, dir)) {
    if (static_cast<std::uint64_t>(it) <= iteration) break;  // newest first
    // Why it is in the way, for the log: a valid checkpoint (this run's own abandoned later one,
    // or another run's), or one this run cannot use (damaged, another version, config, shape).
    Result<Checkpoint> c = load_checkpoint_file(env, dir + "/" + name, expect);
    const std::string after = " after the resumed iteration " + std::to_string(iteration);
    std::string why;
    if (!c.is_ok()) {
      why = "not usable: " + c.status().to_string();
    } else if (!run_id.empty() && c->run_id == run_id) {
      why = "this run's own checkpoint" + after;
    } else {
      why = "run " + (c->run_id.empty() ? std::string("(no id)") : c->run_id) + "'s checkpoint" +
            after;
    }
    GOSSIP_ASSIGN_OR_RETURN(std::string to, move_aside(env, dir, name, run_id));
    moved.push_back({dir + "/" + name, to, why});
  }
  return moved;
}

Result<Checkpoint> load_checkpoint_file(Env& env, const std::string& path,
                                        const CheckpointExpectation& expect) {
  // A checkpoint of the expected shape is its header (under 3 KiB) plus 4 bytes per value: a
  // larger file is refused before it is read.
  const std::uint64_t max_bytes = expect.num_params
                                      ? 4096 + 4 * (expect.num_params + expect.num_optimizer_state)
                                      : ~std::uint64_t{0};
  GOSSIP_ASSIGN_OR_RETURN(std::string bytes, env.read_file(path, max_bytes));
  GOSSIP_ASSIGN_OR_RETURN(Checkpoint c, decode_checkpoint(bytes, path));
  std::string mismatch;
  std::string file = path.substr(path.find_last_of('/') + 1);
  if (c.node != expect.node) {
    mismatch = "belongs to node " + std::to_string(c.node);
  } else if (parse_file_name(file) != static_cast<std::int64_t>(c.iteration)) {
    mismatch = "iteration " + std::to_string(c.iteration) + " does not match its file name";
  } else if (expect.num_params && c.params.size() != expect.num_params) {
    mismatch = "has " + std::to_string(c.params.size()) + " parameters, the model has " +
               std::to_string(expect.num_params);
  } else if (expect.num_params && c.optimizer_state.size() != expect.num_optimizer_state) {
    mismatch = "has " + std::to_string(c.optimizer_state.size()) +
               " optimizer state values, expected " + std::to_string(expect.num_optimizer_state);
  } else if (!expect.topology_fingerprint.empty() &&
             c.topology_fingerprint != expect.topology_fingerprint) {
    mismatch = "was written for a different topology";
  } else if (!expect.config_fingerprint.empty() &&
             c.config_fingerprint != expect.config_fingerprint) {
    mismatch = "was written for a different training config";
  }
  if (!mismatch.empty()) return failed_precondition(path + ": " + mismatch);
  return c;
}

Result<Checkpoint> load_latest_checkpoint(Env& env, const std::string& dir,
                                          const CheckpointExpectation& expect,
                                          std::vector<std::string>* skipped) {
  for (const auto& entry : list_checkpoints(env, dir)) {
    std::string path = dir + "/" + entry.second;
    Result<Checkpoint> c = load_checkpoint_file(env, path, expect);
    if (c.is_ok()) return c;
    GOSSIP_LOG(kWarning) << "skipping checkpoint: " << c.status().to_string();
    if (skipped != nullptr) skipped->push_back(path);
  }
  return not_found("no valid checkpoint in " + dir);
}

}  // namespace gossip::daemon
