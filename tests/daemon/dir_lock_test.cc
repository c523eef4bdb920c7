// DirectoryLock (daemon/dir_lock.h) between real processes (fork: a flock is per open file
// description, so the other holder must be another process's open of LOCK), and check_outputs
// (daemon/outputs.h) on real files, devices, FIFOs and directories.
#include "daemon/dir_lock.h"

#include <doctest/doctest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>

#include "daemon/outputs.h"
#include "tests/support/files.h"
#include "tests/support/process.h"

namespace gossip::daemon {
namespace {

using gossip::testing::fork_with_pipe;
using gossip::testing::ForkedChild;
using gossip::testing::read_all_and_reap;
using gossip::testing::read_file;
using gossip::testing::TempDir;

// What a claim of `dir` in a child process answers: "ok" or the refusal's message (the child
// holds the lock only while it runs, so this also releases what it took).
std::string claim_in_child(const std::string& dir) {
  return read_all_and_reap(fork_with_pipe([&](int fd) {
    auto lock = DirectoryLock::claim(dir, "child");
    const std::string answer = lock.is_ok() ? "ok" : lock.status().to_string();
    (void)!::write(fd, answer.data(), answer.size());
  }));
}

TEST_CASE("a directory lock refuses another process at once, naming the holder, until released") {
  TempDir tmp;
  const std::string dir = tmp.path + "/ckpt/node-0";  // created by the claim
  {
    auto lock = DirectoryLock::claim(dir, "gossipd run, node 0");
    REQUIRE_MESSAGE(lock.is_ok(), lock.status().to_string());
    const std::string line = read_file(dir + "/LOCK");
    CHECK(line.rfind("pid " + std::to_string(::getpid()) + " on host ", 0) == 0);
    CHECK(line.find(" since 20") != std::string::npos);
    CHECK(line.find(": gossipd run, node 0\n") != std::string::npos);
    (*lock)->set_holder("gossipd node 0, run 0123456789abcdef");
    CHECK(read_file(dir + "/LOCK").find("run 0123456789abcdef") != std::string::npos);
    const std::string refused = claim_in_child(dir);
    CAPTURE(refused);
    CHECK(refused.rfind("FailedPrecondition: ", 0) == 0);
    CHECK(refused.find(dir + " is in use by another process") != std::string::npos);
    CHECK(refused.find("pid " + std::to_string(::getpid())) != std::string::npos);
    CHECK(refused.find("run 0123456789abcdef") != std::string::npos);
    // Within this process a second claim shares the lock.
    auto again = DirectoryLock::claim(dir, "other");
    REQUIRE(again.is_ok());
    CHECK(again->get() == lock->get());
  }
  // Released: the line is emptied (the file stays) and another process may take it.
  CHECK(std::filesystem::exists(dir + "/LOCK"));
  CHECK(read_file(dir + "/LOCK").empty());
  CHECK(claim_in_child(dir) == "ok");
}

TEST_CASE("a lock file left by a dead process never blocks: not by its line, not by a SIGKILL") {
  TempDir tmp;
  const std::string dir = tmp.path + "/node-1";
  std::filesystem::create_directories(dir);
  // A line from a process long gone, no lock held: taken, and the line replaced.
  std::ofstream(dir + "/LOCK") << "pid 999999 on host elsewhere since 2001-01-01T00:00:00Z: old\n";
  {
    auto lock = DirectoryLock::claim(dir, "new");
    REQUIRE_MESSAGE(lock.is_ok(), lock.status().to_string());
    CHECK(read_file(dir + "/LOCK").find("pid " + std::to_string(::getpid())) == 0);
  }
  // A holder killed with SIGKILL: the kernel released its lock; its line stays and does not count.
  const ForkedChild holder = fork_with_pipe([&](int fd) {
    auto lock = DirectoryLock::claim(dir, "doomed");
    (void)!::write(fd, lock.is_ok() ? "y" : "n", 1);
    ::pause();
  });
  const pid_t pid = holder.pid;
  char c = 0;
  REQUIRE(::read(holder.read_fd, &c, 1) == 1);
  ::close(holder.read_fd);
  REQUIRE(c == 'y');
  CHECK(claim_in_child(dir).find("pid " + std::to_string(pid)) != std::string::npos);  // held
  ::kill(pid, SIGKILL);
  ::waitpid(pid, nullptr, 0);
  CHECK(read_file(dir + "/LOCK").find("doomed") != std::string::npos);
  auto lock = DirectoryLock::claim(dir, "after the kill");
  REQUIRE_MESSAGE(lock.is_ok(), lock.status().to_string());
}

TEST_CASE("the lock is not inherited by programs this process starts") {
  TempDir tmp;
  const std::string dir = tmp.path + "/work";
  pid_t child = -1;
  {
    auto lock = DirectoryLock::claim(dir, "launcher");
    REQUIRE(lock.is_ok());
    child = ::fork();
    REQUIRE(child >= 0);
    if (child == 0) {
      ::execl("/bin/sleep", "sleep", "30", static_cast<char*>(nullptr));
      ::_exit(127);
    }
  }
  // Once the child runs the program (a forked child holds the descriptor until its exec)...
  for (int k = 0; k < 500 && read_file("/proc/" + std::to_string(child) + "/comm") != "sleep\n";
       ++k) {
    ::usleep(10000);
  }
  REQUIRE(read_file("/proc/" + std::to_string(child) + "/comm") == "sleep\n");
  // ...the launcher released; the program it started still runs and holds nothing.
  CHECK(claim_in_child(dir) == "ok");
  ::kill(child, SIGKILL);
  ::waitpid(child, nullptr, 0);
}

TEST_CASE("claim: a directory that cannot be created is an error naming it") {
  TempDir tmp;
  std::ofstream(tmp.path + "/file") << "x";
  auto under_file = DirectoryLock::claim(tmp.path + "/file/node-0", "x");
  REQUIRE_FALSE(under_file.is_ok());
  CHECK(under_file.status().message().find(tmp.path + "/file/node-0") != std::string::npos);
  auto is_file = DirectoryLock::claim(tmp.path + "/file", "x");
  REQUIRE_FALSE(is_file.is_ok());
  CHECK(is_file.status().message().find("not a directory") != std::string::npos);
}

TEST_CASE("check_outputs: writable outputs pass, nothing is truncated or left behind") {
  TempDir tmp;
  RunOutputs o;
  o.node_id = 2;
  o.checkpoint_dir = tmp.path + "/ck/node-2";
  o.metrics_path = tmp.path + "/m/metrics.jsonl";
  o.metrics_field = "--metrics";
  o.dump_params_dir = tmp.path + "/final";
  o.final_params_path = tmp.path + "/fp/x-2.bin";
  REQUIRE_MESSAGE(check_outputs(o).is_ok(), check_outputs(o).to_string());
  CHECK(std::filesystem::is_directory(o.checkpoint_dir));
  CHECK(std::filesystem::is_directory(tmp.path + "/m"));
  CHECK(std::filesystem::is_empty(o.checkpoint_dir));  // the probe file is gone
  // The directories of the files written at the end were made for the check and removed again.
  CHECK_FALSE(std::filesystem::exists(tmp.path + "/fp"));
  CHECK_FALSE(std::filesystem::exists(tmp.path + "/final"));
  std::filesystem::create_directories(tmp.path + "/fp");
  // Existing files are fine and left as they are; metrics may be a character device.
  std::ofstream(o.metrics_path) << "an earlier line\n";
  std::ofstream(o.final_params_path) << "old";
  o.dump_params_dir = "";
  CHECK(check_outputs(o).is_ok());
  CHECK(read_file(o.metrics_path) == "an earlier line\n");
  CHECK(read_file(o.final_params_path) == "old");
  o.metrics_path = "/dev/stderr";
  CHECK(check_outputs(o).is_ok());
  o.metrics_path = "-";
  CHECK(check_outputs(o).is_ok());
}

TEST_CASE("check_outputs: each output that cannot be written is refused naming field and path") {
  TempDir tmp;
  const std::string fifo = tmp.path + "/fifo", sub = tmp.path + "/sub", file = tmp.path + "/f";
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  std::filesystem::create_directories(sub);
  std::ofstream(file) << "x";
  std::filesystem::create_symlink(file, tmp.path + "/link");
  auto base = [&] {
    RunOutputs o;
    o.node_id = 0;
    o.checkpoint_dir = tmp.path + "/ck/node-0";
    return o;
  };
  struct Case {
    std::string field, path;
    RunOutputs o;
  };
  std::vector<Case> cases;
  for (const std::string& bad : {std::string("/dev/null"), std::string("/dev/full"), fifo, sub,
                                 tmp.path + "/link", file + "/under-a-file"}) {
    RunOutputs o = base();
    o.final_params_path = bad;
    cases.push_back({"final_params_path", bad, o});
  }
  {
    RunOutputs o = base();
    o.checkpoint_dir = file + "/node-0";  // a path under a regular file
    cases.push_back({"checkpoint.dir", file + "/node-0", o});
    o = base();
    o.checkpoint_dir = file;
    cases.push_back({"checkpoint.dir", file, o});
    o = base();
    o.metrics_path = sub;
    o.metrics_field = "--metrics";
    cases.push_back({"--metrics", sub, o});
    o = base();
    o.metrics_path = file + "/m.jsonl";
    o.metrics_field = "metrics_path";
    cases.push_back({"metrics_path", file + "/m.jsonl", o});
    o = base();
    o.dump_params_dir = file;
    cases.push_back({"--dump-params", file, o});
    o = base();
    o.dump_params_dir = sub;
    std::filesystem::create_directories(sub + "/node_0.f32");
    cases.push_back({"--dump-params", sub + "/node_0.f32", o});
    o = base();
    o.checkpoint_dir = "/proc/gossip-no-such-dir/node-0";  // a file system that refuses
    cases.push_back({"checkpoint.dir", "/proc/gossip-no-such-dir", o});
  }
  for (const Case& c : cases) {
    const Status s = check_outputs(c.o);
    CAPTURE(s.to_string());
    CHECK((s.code() == StatusCode::kInvalidArgument || s.code() == StatusCode::kPermissionDenied));
    CHECK(s.message().rfind(c.field + ": ", 0) == 0);
    CHECK(s.message().find(c.path) != std::string::npos);
  }
  // Nothing was replaced or created in their place.
  CHECK(std::filesystem::is_fifo(fifo));
  CHECK(std::filesystem::is_symlink(tmp.path + "/link"));
  CHECK(read_file(file) == "x");
}

TEST_CASE(
    "claim_outputs: a fresh run's directory must hold no checkpoints, a held one names its "
    "holder and the way out") {
  TempDir tmp;
  RunOutputs o;
  o.checkpoint_dir = tmp.path + "/ck/node-0";
  std::filesystem::create_directories(o.checkpoint_dir);
  std::ofstream(o.checkpoint_dir + "/ckpt-000000000010.bin") << "x";
  auto fresh = claim_outputs(o, /*fresh_run=*/true, "gossipd run, node 0");
  REQUIRE_FALSE(fresh.is_ok());
  CHECK(fresh.status().message().find("already holds 1 checkpoint file(s)") != std::string::npos);
  {
    auto resumed = claim_outputs(o, /*fresh_run=*/false, "gossipd run, node 0");
    REQUIRE_MESSAGE(resumed.is_ok(), resumed.status().to_string());
    const std::string refused = claim_in_child(o.checkpoint_dir);
    CHECK(refused.find("gossipd run, node 0") != std::string::npos);
  }
  // The message a second gossipd shows, from claim_checkpoint_dir in another process.
  auto held = claim_outputs(o, false, "first");
  REQUIRE(held.is_ok());
  const std::string m = read_all_and_reap(fork_with_pipe([&](int fd) {
    const auto r = claim_checkpoint_dir(o.checkpoint_dir, "second");
    const std::string answer = r.is_ok() ? "ok" : r.status().message();
    (void)!::write(fd, answer.data(), answer.size());
  }));
  CAPTURE(m);
  CHECK(m.rfind("checkpoint.dir: ", 0) == 0);
  CHECK(m.find(": first") != std::string::npos);
  CHECK(m.find("--set checkpoint.dir=DIR") != std::string::npos);
}

TEST_CASE("final_params_path_for replaces every {node}") {
  CHECK(final_params_path_for("out/{node}/x-{node}.bin", 12) == "out/12/x-12.bin");
  CHECK(final_params_path_for("plain.bin", 3) == "plain.bin");
  CHECK(final_params_path_for("{node}{node}", 7) == "77");
}

}  // namespace
}  // namespace gossip::daemon
