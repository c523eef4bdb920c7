// check_outputs and friends (contract in outputs.h). Plain POSIX calls rather than Env: these
// checks ask the file system questions Env does not (what kind of file, may this process create
// one here), and they must not be faked away by a test's Env.
#include "daemon/outputs.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <vector>

#include "common/env.h"
#include "common/file_type.h"
#include "daemon/checkpoint.h"

namespace gossip::daemon {
namespace {

Status errno_status(const std::string& what, int err) {
  std::string m = what + ": " + std::strerror(err);
  if (err == EACCES || err == EPERM || err == EROFS) return permission_denied(std::move(m));
  return invalid_argument(std::move(m));
}

std::string parent_of(const std::string& path) {
  const std::size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

// Whether this process may create files in the existing directory `dir`: a probe file is created
// and removed (its name carries the pid, so concurrent checks never meet).
Status probe_dir(const std::string& dir) {
  const std::string probe = dir + "/.gossipd-write-probe-" + std::to_string(::getpid());
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) return errno_status("cannot create files in " + dir, errno);
  ::close(fd);
  ::unlink(probe.c_str());
  return Status::ok();
}

// Creates `dir` (the run writes there from its start) and probes it.
Status check_writable_dir(const std::string& dir) {
  GOSSIP_RETURN_IF_ERROR(create_output_dir(dir));
  return probe_dir(dir);
}

// A directory the run creates only when it writes there at the end: probed, not created (a run
// that ends early leaves nothing behind, and concurrent checks of one directory never race). Where
// it does not exist yet, its nearest existing ancestor must be a directory this process may
// create in.
Status check_creatable_dir(const std::string& dir) {
  std::filesystem::path p = dir;
  struct stat st {};
  while (::stat(p.c_str(), &st) != 0) {
    if (errno != ENOENT) return errno_status("cannot create directory " + dir, errno);
    if (!p.has_parent_path() || p.parent_path() == p) {
      p = ".";
      continue;
    }
    p = p.parent_path();
  }
  if (!S_ISDIR(st.st_mode)) {
    return invalid_argument("cannot create directory " + dir + ": " + p.string() +
                            " exists and is " + file_type_name(st.st_mode) + ", not a directory");
  }
  return probe_dir(p.string());
}

// A file the run replaces at the end (Env::write_file_atomic: path and path.tmp): absent or a
// regular file, in a writable directory.
Status check_replaceable_file(const std::string& path) {
  for (const std::string& p : {path, path + ".tmp"}) {
    struct stat st {};
    if (::lstat(p.c_str(), &st) == 0 && !S_ISREG(st.st_mode)) {
      return invalid_argument(p + " exists and is " + file_type_name(st.st_mode) +
                              ", not a regular file; the run would refuse to replace it at the "
                              "end (give a path to a regular file or a new one)");
    }
  }
  if (Status s = check_creatable_dir(parent_of(path)); !s.is_ok()) {
    return Status(s.code(), "cannot write " + path + ": " + s.message());
  }
  return Status::ok();
}

// The metrics file: streamed (opened for appending or truncated, never replaced).
Status check_metrics_file(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    if (errno != ENOENT) return errno_status(path, errno);
    if (Status s = check_writable_dir(parent_of(path)); !s.is_ok()) {
      return Status(s.code(), "cannot write " + path + ": " + s.message());
    }
    return Status::ok();
  }
  if (S_ISDIR(st.st_mode) || S_ISSOCK(st.st_mode) || S_ISBLK(st.st_mode)) {
    return invalid_argument(path + " is " + file_type_name(st.st_mode) +
                            "; metrics go to a regular file, a FIFO, a character device or '-'");
  }
  if (::access(path.c_str(), W_OK) != 0) return errno_status("cannot write " + path, errno);
  return Status::ok();
}

}  // namespace

std::string node_checkpoint_dir(const std::string& dir, int node_id) {
  return dir + "/node-" + std::to_string(node_id);
}

std::string final_params_path_for(std::string pattern, int node_id) {
  const std::string id = std::to_string(node_id);
  for (std::size_t at = 0; (at = pattern.find("{node}", at)) != std::string::npos;) {
    pattern.replace(at, 6, id);
    at += id.size();
  }
  return pattern;
}

std::string dump_params_file(const std::string& dir, int node_id) {
  return dir + "/node_" + std::to_string(node_id) + ".f32";
}

RunOutputs run_outputs(const config::TrainConfig& config, int node_id,
                       const std::string& metrics_flag, const std::string& dump_params_dir) {
  RunOutputs o;
  o.node_id = node_id;
  o.checkpoint_dir = node_checkpoint_dir(config.checkpoint().dir(), node_id);
  if (!metrics_flag.empty()) {
    o.metrics_path = metrics_flag;
    o.metrics_field = "--metrics";
  } else if (!config.metrics_path().empty()) {
    o.metrics_path = config.metrics_path();
    o.metrics_field = "metrics_path";
  } else {
    o.metrics_path = o.checkpoint_dir + "/metrics.jsonl";
    o.metrics_field = "checkpoint.dir";
  }
  o.dump_params_dir = dump_params_dir;
  if (!config.final_params_path().empty()) {
    o.final_params_path = final_params_path_for(config.final_params_path(), node_id);
  }
  return o;
}

Status create_output_dir(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  struct stat st {};
  if (::stat(dir.c_str(), &st) == 0) {
    if (S_ISDIR(st.st_mode)) return Status::ok();
    return invalid_argument(dir + " exists and is " + file_type_name(st.st_mode) +
                            ", not a directory");
  }
  return errno_status("cannot create directory " + dir, ec ? ec.value() : errno);
}

Status check_outputs(const RunOutputs& o) {
  if (!o.checkpoint_dir.empty()) {
    GOSSIP_RETURN_IF_ERROR(check_writable_dir(o.checkpoint_dir).with_context("checkpoint.dir"));
  }
  if (!o.metrics_path.empty() && o.metrics_path != "-") {
    GOSSIP_RETURN_IF_ERROR(check_metrics_file(o.metrics_path)
                               .with_context(o.metrics_field == "checkpoint.dir"
                                                 ? "metrics file (default, in checkpoint.dir)"
                                                 : o.metrics_field));
  }
  if (!o.dump_params_dir.empty()) {
    Status s = check_creatable_dir(o.dump_params_dir);
    if (s.is_ok()) s = check_replaceable_file(dump_params_file(o.dump_params_dir, o.node_id));
    GOSSIP_RETURN_IF_ERROR(s.with_context("--dump-params"));
  }
  if (!o.final_params_path.empty()) {
    GOSSIP_RETURN_IF_ERROR(
        check_replaceable_file(o.final_params_path).with_context("final_params_path"));
  }
  return Status::ok();
}

Result<std::shared_ptr<DirectoryLock>> claim_checkpoint_dir(const std::string& dir,
                                                            std::string_view holder) {
  Result<std::shared_ptr<DirectoryLock>> claimed = DirectoryLock::claim(dir, holder);
  if (claimed.is_ok()) return claimed;
  Status s = claimed.status();
  if (s.code() == StatusCode::kFailedPrecondition) {
    s = failed_precondition(
        s.message() +
        ": two runs in one checkpoint directory would overwrite each other's checkpoints; give "
        "this run its own checkpoint.dir (e.g. --set checkpoint.dir=DIR; a relative one, like the "
        "default \"checkpoints\", is under the working directory) or stop the other run");
  }
  return s.with_context("checkpoint.dir");
}

Result<std::shared_ptr<DirectoryLock>> claim_outputs(const RunOutputs& o, bool fresh_run,
                                                     std::string_view holder) {
  std::shared_ptr<DirectoryLock> lock;
  if (!o.checkpoint_dir.empty()) {
    GOSSIP_ASSIGN_OR_RETURN(lock, claim_checkpoint_dir(o.checkpoint_dir, holder));
    if (fresh_run) GOSSIP_RETURN_IF_ERROR(check_fresh_directory(Env::system(), o.checkpoint_dir));
  }
  GOSSIP_RETURN_IF_ERROR(check_outputs(o));
  return lock;
}

}  // namespace gossip::daemon
