// Env: atomic replace, errors that name the path, and fault injection through a derived Env.
#include "common/env.h"

#include <doctest/doctest.h>
#include <unistd.h>

#include <filesystem>

namespace gossip {
namespace {

std::string temp_dir() {
  std::string d = std::filesystem::temp_directory_path() / ("gossip_env_test_" + std::to_string(::getpid()));
  std::filesystem::remove_all(d);
  std::filesystem::create_directories(d);
  return d;
}

TEST_CASE("write_file_atomic replaces the file and leaves no temporary") {
  Env& env = Env::system();
  const std::string dir = temp_dir();
  const std::string path = dir + "/a.bin";
  REQUIRE(env.write_file_atomic(path, "first").is_ok());
  REQUIRE(env.write_file_atomic(path, std::string("sec\0ond", 7)).is_ok());
  auto data = env.read_file(path);
  REQUIRE(data.is_ok());
  CHECK(*data == std::string("sec\0ond", 7));
  CHECK_FALSE(env.file_exists(path + ".tmp"));
  auto names = env.list_dir(dir);
  REQUIRE(names.is_ok());
  CHECK(names->size() == 1);
  std::filesystem::remove_all(dir);
}

TEST_CASE("errors name the path and the reason") {
  Env& env = Env::system();
  auto missing = env.read_file("/nonexistent/dir/x.pbtxt");
  REQUIRE_FALSE(missing.is_ok());
  CHECK(missing.status().code() == StatusCode::kNotFound);
  CHECK(missing.status().message().find("/nonexistent/dir/x.pbtxt") != std::string::npos);
  Status w = env.write_file_atomic("/nonexistent/dir/y", "z");
  CHECK_FALSE(w.is_ok());
  CHECK(w.message().find("/nonexistent/dir/y.tmp") != std::string::npos);
}

// A disk that is full: every write fails the way write(2) does with ENOSPC.
class FullDiskEnv : public Env {
 public:
  Status write_file_atomic(const std::string& path, std::string_view) override {
    return io_error("writing " + path + ".tmp: No space left on device");
  }
};

TEST_CASE("a derived Env injects faults without touching the caller") {
  FullDiskEnv env;
  const std::string dir = temp_dir();
  Status s = env.write_file_atomic(dir + "/c", "data");
  CHECK(s.code() == StatusCode::kIoError);
  CHECK_FALSE(env.file_exists(dir + "/c"));
  std::filesystem::remove_all(dir);
}

TEST_CASE("ManualClock moves only when told") {
  ManualClock clock(100);
  Stopwatch sw(clock);
  CHECK(sw.elapsed_ns() == 0);
  clock.sleep_for_ns(250);
  CHECK(sw.elapsed_ns() == 250);
  CHECK(clock.monotonic_ns() == 350);
}

}  // namespace
}  // namespace gossip
