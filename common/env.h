// Env: everything the operating system provides to gossip-sgd — files and the clock — behind one
// injectable interface (after leveldb's Env), so that fault-injection tests can make a disk fill
// up or a clock jump without touching the code under test.
//
// Env::system() is the real one and is thread-safe. A test derives from Env, overrides the calls
// it wants to break and forwards the rest to Env::system().
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/clock.h"
#include "common/status.h"

namespace gossip {

// The default cap of Env::read_file: input files (topologies, configs, data sets) larger than
// this are refused rather than read into memory.
inline constexpr std::uint64_t kMaxInputFileBytes = std::uint64_t{1} << 30;  // 1 GiB

class Env {
 public:
  virtual ~Env() = default;

  // Whole-file read of a regular file, or of standard input when `path` is "-". NotFound when
  // the file does not exist; InvalidArgument for anything that is not a regular file (a
  // directory, a device such as /dev/zero, a FIFO); OutOfRange when it holds more than
  // `max_bytes` (checked before reading and again while reading, so memory stays bounded even
  // for a file that grows or for standard input); IoError for anything else.
  virtual Result<std::string> read_file(const std::string& path,
                                        std::uint64_t max_bytes = kMaxInputFileBytes);

  // At most the first `max_bytes` bytes of a regular file (fewer when it is shorter); errors as
  // read_file.
  virtual Result<std::string> read_file_head(const std::string& path, std::size_t max_bytes);

  // Crash-safe replace of `path` with `data`: write `path` + ".tmp", fsync it, rename over
  // `path`, fsync the directory. After a crash at any point `path` holds either the old or the
  // new contents, never a mix; a leftover ".tmp" may remain and is the reader's to ignore.
  // Only a regular file is ever replaced: when `path` (or `path` + ".tmp") exists and is
  // anything else — a device such as /dev/null, a directory, a FIFO, a symbolic link — the
  // call fails with FailedPrecondition and touches nothing.
  virtual Status write_file_atomic(const std::string& path, std::string_view data);

  virtual bool file_exists(const std::string& path);
  virtual Status remove_file(const std::string& path);
  // rename(2): `from` takes the name `to` (same file system); refuses to replace an existing `to`.
  virtual Status rename_file(const std::string& from, const std::string& to);
  virtual Status create_dirs(const std::string& path);
  // Names (not paths) of the entries of a directory, sorted.
  virtual Result<std::vector<std::string>> list_dir(const std::string& path);

  virtual Clock& clock() { return Clock::system(); }

  static Env& system();
};

}  // namespace gossip
