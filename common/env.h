// Env: everything the operating system provides to gossip-sgd — files and the clock — behind one
// injectable interface (after leveldb's Env), so that fault-injection tests can make a disk fill
// up or a clock jump without touching the code under test.
//
// Env::system() is the real one and is thread-safe. A test derives from Env, overrides the calls
// it wants to break and forwards the rest to Env::system().
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "common/clock.h"
#include "common/status.h"

namespace gossip {

class Env {
 public:
  virtual ~Env() = default;

  // Whole-file read. NotFound when the file does not exist; IoError for anything else.
  virtual Result<std::string> read_file(const std::string& path);

  // Crash-safe replace of `path` with `data`: write `path` + ".tmp", fsync it, rename over
  // `path`, fsync the directory. After a crash at any point `path` holds either the old or the
  // new contents, never a mix; a leftover ".tmp" may remain and is the reader's to ignore.
  virtual Status write_file_atomic(const std::string& path, std::string_view data);

  virtual bool file_exists(const std::string& path);
  virtual Status remove_file(const std::string& path);
  virtual Status create_dirs(const std::string& path);
  // Names (not paths) of the entries of a directory, sorted.
  virtual Result<std::vector<std::string>> list_dir(const std::string& path);

  virtual Clock& clock() { return Clock::system(); }

  static Env& system();
};

}  // namespace gossip
