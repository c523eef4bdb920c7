// Env: atomic replace, errors that name the path, and fault injection through a derived Env.
#include "common/env.h"

#include <doctest/doctest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>

#include "tests/support/files.h"

namespace gossip {
namespace {

using gossip::testing::TempDir;

TEST_CASE("write_file_atomic replaces the file and leaves no temporary") {
  Env& env = Env::system();
  const TempDir tmp;
  const std::string& dir = tmp.path;
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
  const TempDir tmp;
  const std::string& dir = tmp.path;
  Status s = env.write_file_atomic(dir + "/c", "data");
  CHECK(s.code() == StatusCode::kIoError);
  CHECK_FALSE(env.file_exists(dir + "/c"));
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

namespace gossip {
namespace {

TEST_CASE("read_file refuses devices, FIFOs and files over the cap before reading them") {
  Env& env = Env::system();
  const TempDir tmp;
  const std::string& dir = tmp.path;
  // /dev/zero would grow without bound: refused at once, naming the path and what it is.
  auto zero = env.read_file("/dev/zero");
  REQUIRE_FALSE(zero.is_ok());
  CHECK(zero.status().code() == StatusCode::kInvalidArgument);
  CHECK(zero.status().message().find("/dev/zero is a character device") != std::string::npos);
  // A FIFO with no writer would block forever.
  const std::string fifo = dir + "/fifo";
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  auto f = env.read_file(fifo);
  REQUIRE_FALSE(f.is_ok());
  CHECK(f.status().message().find("is a FIFO") != std::string::npos);
  // The cap: exactly max_bytes is fine, one more is OutOfRange.
  REQUIRE(env.write_file_atomic(dir + "/ten", "0123456789").is_ok());
  CHECK(env.read_file(dir + "/ten", 10).is_ok());
  auto big = env.read_file(dir + "/ten", 9);
  REQUIRE_FALSE(big.is_ok());
  CHECK(big.status().code() == StatusCode::kOutOfRange);
  CHECK(big.status().message().find("limit of 9 bytes") != std::string::npos);
  auto head = env.read_file_head(dir + "/ten", 4);
  REQUIRE(head.is_ok());
  CHECK(*head == "0123");
}

TEST_CASE("write_file_atomic never replaces what is not a regular file") {
  Env& env = Env::system();
  const TempDir tmp;
  const std::string& dir = tmp.path;
  const std::string fifo = dir + "/fifo", link = dir + "/link", target = dir + "/target",
                    sub = dir + "/sub";
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  REQUIRE(env.write_file_atomic(target, "keep").is_ok());
  std::filesystem::create_symlink(target, link);
  std::filesystem::create_directories(sub);
  for (const std::string& p : {fifo, link, sub, std::string("/dev/null")}) {
    CAPTURE(p);
    Status s = env.write_file_atomic(p, "new");
    REQUIRE_FALSE(s.is_ok());
    CHECK(s.code() == StatusCode::kFailedPrecondition);
    CHECK(s.message().find("not a regular file") != std::string::npos);
    CHECK_FALSE(env.file_exists(p + ".tmp"));
  }
  std::error_code ec;
  CHECK(std::filesystem::is_fifo(fifo));
  CHECK(std::filesystem::is_symlink(link));
  CHECK(std::filesystem::is_directory(sub));
  CHECK(std::filesystem::is_character_file("/dev/null"));
  CHECK(*env.read_file(target) == "keep");
  // A symbolic link planted at the temporary path is refused too, not followed.
  const std::string out = dir + "/out";
  std::filesystem::create_symlink(target, out + ".tmp");
  CHECK_FALSE(env.write_file_atomic(out, "x").is_ok());
  CHECK(*env.read_file(target) == "keep");
}

}  // namespace
}  // namespace gossip
