// DirectoryLock: one process owns a directory for as long as it runs — a gossipd run its node's
// checkpoint directory, a launch its workdir — so that two runs started on one directory can
// neither write through each other's files nor delete or rename them (docs/fault.md, "Directory
// ownership").
//
// The lock is an exclusive flock(2) on DIR/LOCK, taken without waiting: a second process is
// refused at once. The file holds one line naming the holder,
//
//   pid 4242 on host n1 since 2025-06-01T10:00:00Z: gossipd run, node 0, run 0123456789abcdef
//
// so that the refusal can say who holds the directory and since when. The kernel releases a flock
// when its holder exits, however it exits (SIGKILL and power loss included), so a LOCK file left
// behind by a dead process never blocks: the next run takes the lock and writes its own line. A
// clean release empties the line. LOCK is never deleted (deleting a lock file lets two processes
// lock two different files of one name). flock works on local file systems and on NFS (Linux
// emulates it there with byte-range locks).
//
// Within one process, claims of one directory (same device and inode) share one lock: claim()
// returns the same object while anybody keeps it, so gossipd's start and its checkpoint writer can
// both claim the node's directory; the lock is released with the last reference. The descriptor is
// close-on-exec, so the children a launcher spawns never inherit it. Thread-safe.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "common/status.h"

namespace gossip::daemon {

inline constexpr char kLockFileName[] = "LOCK";

class DirectoryLock {
 public:
  // Creates `dir` if needed and locks dir/LOCK for this process, recording `holder` (what holds
  // it, e.g. "gossipd run, node 0"). FailedPrecondition naming the directory and the holder's
  // line when another process holds it; PermissionDenied or IoError naming the path when the
  // directory or its LOCK file cannot be created or locked.
  static Result<std::shared_ptr<DirectoryLock>> claim(const std::string& dir,
                                                      std::string_view holder);

  ~DirectoryLock();  // empties the holder line and releases the lock
  DirectoryLock(const DirectoryLock&) = delete;
  DirectoryLock& operator=(const DirectoryLock&) = delete;

  // Replaces what the holder line says after "since ...: " (e.g. once the run id is known).
  void set_holder(std::string_view holder);

  // The directory's absolute path.
  const std::string& dir() const { return dir_; }
  // The holder line as written now.
  std::string holder_line() const;

 private:
  DirectoryLock(int fd, std::string dir, std::string prefix);
  void write_line(std::string_view holder);

  const int fd_;
  const int pid_;  // the process that took the lock
  const std::string dir_;
  const std::string prefix_;  // "pid P on host H since T: "
  std::string holder_;        // guarded by the registry's mutex (dir_lock.cc)
};

}  // namespace gossip::daemon
