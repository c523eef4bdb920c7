// The name of a file's type as a stat(2) mode gives it, for messages that say why a path cannot be
// used ("… exists and is a directory"). Shared by Env (common/env.cc) and the daemon's output
// checks (daemon/outputs.cc). Thread-safe.
#pragma once

#include <sys/stat.h>

namespace gossip {

// "a regular file", "a directory", "a FIFO", "a socket", "a character device", "a block device",
// "a symbolic link" (from lstat); a static string.
inline const char* file_type_name(mode_t mode) {
  if (S_ISREG(mode)) return "a regular file";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISLNK(mode)) return "a symbolic link";
  return "a file of unknown type";
}

}  // namespace gossip
