// Hostile and broken checkpoints (issue 8), through the checkpoint API gossipd's --resume uses
// (daemon/checkpoint.h): truncated files, wrong magic, bad checksum, wrong shape, a future
// version, lying length fields, leftover temporary files, and a disk that fills up while a
// checkpoint is written (an Env derived to fail like ENOSPC). Every bad file is refused with a
// Status naming it, never loaded, and resume falls back to the newest good checkpoint.
#include <zlib.h>

#include <map>

#include "common/env.h"
#include "common/little_endian.h"
#include "common/random.h"
#include "daemon/checkpoint.h"
#include "tests/fault/fault_test_util.h"
#include "tests/support/process.h"

namespace gossip::fault_testing {
namespace {

using daemon::Checkpoint;
using daemon::CheckpointExpectation;

constexpr std::uint32_t kNode = 3;

Checkpoint make(std::uint64_t iteration, std::size_t params = 100,
                const std::string& run_id = "run-a") {
  Checkpoint c;
  c.node = kNode;
  c.run_id = run_id;
  c.iteration = iteration;
  c.topology_fingerprint = "topo-fp";
  c.config_fingerprint = "config-fp";
  c.sampler.rng_state = {1, 2, 3, iteration};
  c.sampler.epoch = 2;
  c.sampler.position = 17;
  c.sampler.batches = iteration;
  for (std::size_t k = 0; k < params; ++k)
    c.params.push_back(0.5f * static_cast<float>(k) + iteration);
  c.optimizer_state.assign(params, 0.25f);
  return c;
}

CheckpointExpectation expect(std::uint64_t params = 100) {
  return {kNode, params, params, "topo-fp", "config-fp"};
}

// Recomputes the trailing CRC-32, so a forged field passes the checksum and the decoder's other
// checks must catch it.
void reseal(std::string& b) {
  const uLong crc = crc32(crc32(0L, Z_NULL, 0), reinterpret_cast<const Bytef*>(b.data()),
                          static_cast<uInt>(b.size() - 4));
  put_u32(b.data() + b.size() - 4, static_cast<std::uint32_t>(crc));
}

const std::string kNewName = daemon::checkpoint_file_name(200);

// A checkpoint directory with a good file at iteration 100 and `bad` written as iteration 200.
struct Dir {
  TempDir tmp;
  std::string dir = tmp.path + "/node-3";
  Dir() {
    auto w = daemon::write_checkpoint(Env::system(), dir, make(100), 5);
    REQUIRE_MESSAGE(w.is_ok(), w.status().to_string());
  }
  std::string put(const std::string& name, const std::string& bytes) const {
    std::ofstream(dir + "/" + name, std::ios::binary) << bytes;
    return dir + "/" + name;
  }
  // Loads `name` directly, and checks that resume skips it for the good iteration-100 file.
  Status load_bad(const std::string& name) const {
    auto direct = daemon::load_checkpoint_file(Env::system(), dir + "/" + name, expect());
    std::vector<std::string> skipped;
    auto latest = daemon::load_latest_checkpoint(Env::system(), dir, expect(), &skipped);
    REQUIRE_MESSAGE(latest.is_ok(), latest.status().to_string());
    CHECK(latest->iteration == 100);
    CHECK(latest->params == make(100).params);
    CHECK(skipped == std::vector<std::string>{dir + "/" + name});
    REQUIRE_FALSE(direct.is_ok());
    CHECK(contains(direct.status().message(), dir + "/" + name));
    return direct.status();
  }
  // Writes `bytes` as the iteration-200 file; load_bad() on it, and its error has `code` and says
  // `what`.
  void expect_refused(const std::string& bytes, StatusCode code, const std::string& what) const {
    put(kNewName, bytes);
    const Status s = load_bad(kNewName);
    INFO("message: ", s.message());
    CHECK(s.code() == code);
    CHECK(contains(s.message(), what));
  }
};

TEST_CASE("control: a good newer checkpoint is the one resume picks") {
  Dir d;
  d.put(kNewName, daemon::encode_checkpoint(make(200)));
  auto latest = daemon::load_latest_checkpoint(Env::system(), d.dir, expect());
  REQUIRE(latest.is_ok());
  CHECK(latest->iteration == 200);
}

TEST_CASE("truncated at every length: refused as Corruption, resume falls back") {
  const std::string good = daemon::encode_checkpoint(make(200));
  for (std::size_t len : {std::size_t{0}, std::size_t{7}, std::size_t{51}, good.size() / 2,
                          good.size() - 4, good.size() - 1}) {
    CAPTURE(len);
    Dir d;
    d.expect_refused(good.substr(0, len), StatusCode::kCorruption, "truncated");
  }
  // Exhaustively through the decoder alone (cheap): no prefix ever decodes.
  for (std::size_t len = 0; len < good.size(); ++len)
    REQUIRE_FALSE(daemon::decode_checkpoint(std::string_view(good).substr(0, len), "x").is_ok());
}

TEST_CASE("wrong magic: refused as not a checkpoint") {
  Dir d;
  std::string b = daemon::encode_checkpoint(make(200));
  b[0] = 'X';
  reseal(b);
  d.expect_refused(b, StatusCode::kCorruption, "wrong magic");
}

TEST_CASE("bad checksum: a flipped bit anywhere in the parameters is caught") {
  Dir d;
  std::string b = daemon::encode_checkpoint(make(200));
  b[b.size() - 40] ^= 0x10;
  d.expect_refused(b, StatusCode::kCorruption, "checksum");
}

TEST_CASE("wrong shape: another model's parameter or optimizer-state count is refused") {
  Dir d;
  d.expect_refused(daemon::encode_checkpoint(make(200, 64)), StatusCode::kFailedPrecondition,
                   "64 parameters, the model has 100");

  Dir e;
  Checkpoint c = make(200);
  c.optimizer_state.resize(3);
  e.put(kNewName, daemon::encode_checkpoint(c));
  CHECK(contains(e.load_bad(kNewName).message(), "optimizer state"));
}

TEST_CASE("another node's, another topology's or another config's checkpoint is refused") {
  Checkpoint other_node = make(200);
  other_node.node = 4;
  Checkpoint other_topo = make(200);
  other_topo.topology_fingerprint = "another";
  Checkpoint other_cfg = make(200);
  other_cfg.config_fingerprint = "another";
  for (const auto& [c, what] :
       {std::pair{other_node, "belongs to node 4"}, std::pair{other_topo, "different topology"},
        std::pair{other_cfg, "different training config"}}) {
    CAPTURE(what);
    Dir d;
    d.put(kNewName, daemon::encode_checkpoint(c));
    CHECK(contains(d.load_bad(kNewName).message(), what));
  }
}

TEST_CASE("a future version is refused as unsupported, not misread") {
  Dir d;
  std::string b = daemon::encode_checkpoint(make(200));
  put_u32(b.data() + 8, daemon::kCheckpointVersion + 1);
  reseal(b);
  d.expect_refused(b, StatusCode::kFailedPrecondition,
                   "version " + std::to_string(daemon::kCheckpointVersion + 1));
  put_u32(b.data() + 8, 0xffffffffu);
  reseal(b);
  CHECK_FALSE(daemon::decode_checkpoint(b, "x").is_ok());
}

TEST_CASE("forged length fields with a valid checksum are refused without allocating") {
  const std::string good = daemon::encode_checkpoint(make(200));
  // num_params = 2^61 (would be 8 EiB of floats), then a fingerprint length of 4 GiB.
  std::string a = good;
  put_u64(a.data() + 32, std::uint64_t{1} << 61);
  reseal(a);
  auto ra = daemon::decode_checkpoint(a, "forged.bin");
  REQUIRE_FALSE(ra.is_ok());
  CHECK(ra.status().code() == StatusCode::kCorruption);
  CHECK(contains(ra.status().message(), "forged.bin"));
  std::string b = good;
  put_u32(b.data() + 48, 0xffffffffu);
  reseal(b);
  CHECK(daemon::decode_checkpoint(b, "forged.bin").status().code() == StatusCode::kCorruption);
  // A total-size field that disagrees with the file.
  std::string c = good;
  put_u64(c.data() + 16, good.size() + 8);
  reseal(c);
  CHECK(daemon::decode_checkpoint(c, "forged.bin").status().code() == StatusCode::kCorruption);
}

TEST_CASE("leftover temporary files are never read, even when newer and complete") {
  Dir d;
  // What a crash between write and rename leaves: a half-written newer file ...
  d.put(kNewName + ".tmp", daemon::encode_checkpoint(make(200)).substr(0, 60));
  // ... and a complete one whose rename never happened.
  d.put(daemon::checkpoint_file_name(300) + ".tmp", daemon::encode_checkpoint(make(300)));
  std::vector<std::string> skipped;
  auto latest = daemon::load_latest_checkpoint(Env::system(), d.dir, expect(), &skipped);
  REQUIRE(latest.is_ok());
  CHECK(latest->iteration == 100);
  CHECK(skipped.empty());  // not even looked at
  // The next checkpoint is written over the leftover without trouble.
  auto w = daemon::write_checkpoint(Env::system(), d.dir, make(200), 5);
  REQUIRE_MESSAGE(w.is_ok(), w.status().to_string());
  auto again = daemon::load_latest_checkpoint(Env::system(), d.dir, expect());
  REQUIRE(again.is_ok());
  CHECK(again->iteration == 200);
}

TEST_CASE("files that only look like checkpoints are ignored") {
  Dir d;
  d.put("ckpt-notanumber.bin", "garbage");
  d.put("ckpt-000000000500.bin.bak", "garbage");
  d.put("README", "garbage");
  std::vector<std::string> skipped;
  auto latest = daemon::load_latest_checkpoint(Env::system(), d.dir, expect(), &skipped);
  REQUIRE(latest.is_ok());
  CHECK(latest->iteration == 100);
  CHECK(skipped.empty());
}

// An Env whose disk holds `free_bytes` more bytes: a write that does not fit leaves a truncated
// temporary file behind and fails with ENOSPC's message, as the real write(2) would.
class FullDiskEnv : public Env {
 public:
  explicit FullDiskEnv(std::size_t free_bytes) : free_bytes_(free_bytes) {}
  Result<std::string> read_file(const std::string& p, std::uint64_t max_bytes) override {
    return system().read_file(p, max_bytes);
  }
  Status write_file_atomic(const std::string& path, std::string_view data) override {
    ++writes_;
    if (data.size() > free_bytes_) {
      std::ofstream(path + ".tmp", std::ios::binary) << data.substr(0, free_bytes_);
      return io_error("writing " + path + ".tmp: No space left on device");
    }
    free_bytes_ -= data.size();
    return system().write_file_atomic(path, data);
  }
  bool file_exists(const std::string& p) override { return system().file_exists(p); }
  Status remove_file(const std::string& p) override {
    ++removes_;
    return system().remove_file(p);
  }
  Status create_dirs(const std::string& p) override { return system().create_dirs(p); }
  Result<std::vector<std::string>> list_dir(const std::string& p) override {
    return system().list_dir(p);
  }
  int writes_ = 0;
  int removes_ = 0;

 private:
  std::size_t free_bytes_;
};

TEST_CASE("a full disk while checkpointing: an IoError naming the file, older checkpoints kept") {
  Dir d;
  const std::size_t one = daemon::encode_checkpoint(make(200)).size();
  FullDiskEnv env(one + one / 2);  // room for one more checkpoint, not two
  auto first = daemon::write_checkpoint(env, d.dir, make(200), 1);
  REQUIRE_MESSAGE(first.is_ok(), first.status().to_string());
  const int removes_after_first = env.removes_;
  CHECK(removes_after_first == 1);  // keep = 1: iteration 100 pruned after 200 was safely written

  auto second = daemon::write_checkpoint(env, d.dir, make(300), 1);
  REQUIRE_FALSE(second.is_ok());
  CHECK(second.status().code() == StatusCode::kIoError);
  CHECK(contains(second.status().message(), d.dir + "/" + daemon::checkpoint_file_name(300)));
  CHECK(contains(second.status().message(), "No space left on device"));
  CHECK(env.removes_ == removes_after_first);  // a failed write never prunes the good one

  // Resume still finds iteration 200 intact; the truncated temporary file is not read.
  std::vector<std::string> skipped;
  auto latest = daemon::load_latest_checkpoint(Env::system(), d.dir, expect(), &skipped);
  REQUIRE(latest.is_ok());
  CHECK(latest->iteration == 200);
  CHECK(latest->params == make(200).params);
  CHECK(skipped.empty());
  CHECK(fs::exists(d.dir + "/" + daemon::checkpoint_file_name(300) + ".tmp"));
  CHECK_FALSE(fs::exists(d.dir + "/" + daemon::checkpoint_file_name(300)));
}

TEST_CASE("a checkpoint directory that cannot be created is an error naming it") {
  TempDir t;
  const std::string file = t.write("not-a-dir", "x");
  auto w = daemon::write_checkpoint(Env::system(), file + "/node-3", make(1), 1);
  REQUIRE_FALSE(w.is_ok());
  CHECK(contains(w.status().message(), file + "/node-3"));
}

}  // namespace
}  // namespace gossip::fault_testing

namespace gossip::fault_testing {
namespace {

// Iterations of the ckpt-*.bin files in `dir`, ascending.
std::vector<std::uint64_t> iterations_in(const std::string& dir) {
  std::vector<std::uint64_t> out;
  auto names = Env::system().list_dir(dir);
  if (!names.is_ok()) return out;
  for (const std::string& n : *names) {
    if (n.size() == 21 && n.rfind("ckpt-", 0) == 0 && n.substr(17) == ".bin") {
      out.push_back(std::stoull(n.substr(5, 12)));
    }
  }
  return out;
}

// A node's checkpoint directory, `dir`, not created yet, in a scratch directory.
struct NodeDir {
  TempDir tmp;
  const std::string dir = tmp.path + "/node-3";
  Env& env = Env::system();
};

TEST_CASE_FIXTURE(
    NodeDir,
    "an earlier run's checkpoints, even at higher iterations, are never deleted or replaced") {
  // Run A got to iteration 500, keeping 3.
  for (std::uint64_t it : {100, 200, 300, 400, 500}) {
    REQUIRE(daemon::write_checkpoint(env, dir, make(it, 100, "run-a"), 3).is_ok());
  }
  CHECK(iterations_in(dir) == std::vector<std::uint64_t>{300, 400, 500});
  // A fresh run is refused the directory outright, naming it and the iterations there.
  Status fresh = daemon::check_fresh_directory(env, dir);
  REQUIRE_FALSE(fresh.is_ok());
  CHECK(contains(fresh.message(), dir));
  CHECK(contains(fresh.message(), "iterations 300..500"));
  CHECK(daemon::check_fresh_directory(env, tmp.path + "/empty").is_ok());
  // Run B (as after --resume-or-start found nothing usable) writes below A's numbers with keep 2:
  // every file it writes survives its own pruning, and A's files are untouched.
  for (std::uint64_t it = 10; it <= 93; it += 10) {
    const std::uint64_t at = it == 90 ? 93 : it;
    auto w = daemon::write_checkpoint(env, dir, make(at, 100, "run-b"), 2);
    REQUIRE_MESSAGE(w.is_ok(), w.status().to_string());
    CHECK(env.file_exists(*w));
    auto mine = daemon::load_checkpoint_file(env, *w, expect());
    REQUIRE(mine.is_ok());
    CHECK(mine->run_id == "run-b");
    for (std::uint64_t a : {300, 400, 500})
      CHECK(env.file_exists(dir + "/" + daemon::checkpoint_file_name(a)));
  }
  CHECK(iterations_in(dir) == std::vector<std::uint64_t>{80, 93, 300, 400, 500});
  // B reaches A's numbers: it may not replace A's file of the same name (an error naming it),
  // and passing them deletes none of A's.
  auto clash = daemon::write_checkpoint(env, dir, make(300, 100, "run-b"), 2);
  REQUIRE_FALSE(clash.is_ok());
  CHECK(contains(clash.status().message(), daemon::checkpoint_file_name(300)));
  CHECK(contains(clash.status().message(), "another run"));
  auto a300 =
      daemon::load_checkpoint_file(env, dir + "/" + daemon::checkpoint_file_name(300), expect());
  REQUIRE(a300.is_ok());
  CHECK(a300->run_id == "run-a");
  REQUIRE(daemon::write_checkpoint(env, dir, make(600, 100, "run-b"), 2).is_ok());
  REQUIRE(daemon::write_checkpoint(env, dir, make(700, 100, "run-b"), 2).is_ok());
  CHECK(iterations_in(dir) == std::vector<std::uint64_t>{300, 400, 500, 600, 700});
  // A damaged file is never deleted either (its run cannot be read).
  std::ofstream(dir + "/" + daemon::checkpoint_file_name(650), std::ios::binary) << "garbage";
  REQUIRE(daemon::write_checkpoint(env, dir, make(800, 100, "run-b"), 1).is_ok());
  CHECK(iterations_in(dir) == std::vector<std::uint64_t>{300, 400, 500, 650, 800});
}

TEST_CASE_FIXTURE(
    NodeDir,
    "resuming at k sets aside every file after k, whatever it is, byte for byte, saying why, "
    "files at or below k stay") {
  for (std::uint64_t it : {10, 20, 30, 40}) {
    REQUIRE(daemon::write_checkpoint(env, dir, make(it, 100, "run-a"), 9).is_ok());
  }
  std::string damaged = daemon::encode_checkpoint(make(50, 100, "run-a"));
  damaged[damaged.size() / 2] ^= 0x40;  // checksum mismatch
  std::ofstream(dir + "/" + daemon::checkpoint_file_name(50), std::ios::binary) << damaged;
  REQUIRE(daemon::write_checkpoint(env, dir, make(60, 100, "run-b"), 9).is_ok());
  REQUIRE(daemon::write_checkpoint(env, dir, make(70, 64, "run-a"), 9).is_ok());  // wrong shape
  std::map<std::string, std::string> before;
  for (std::uint64_t it : {30, 40, 50, 60, 70}) {
    const std::string name = daemon::checkpoint_file_name(it);
    before[name] = read_file(dir + "/" + name);
  }
  auto moved = daemon::set_aside_after(env, dir, 20, expect(), "run-a");
  REQUIRE_MESSAGE(moved.is_ok(), moved.status().to_string());
  REQUIRE(moved->size() == 5);
  std::map<std::string, std::string> reasons;
  for (const auto& m : *moved) {
    CHECK(m.to == dir + "/set-aside-run-a/" + fs::path(m.from).filename().string());
    reasons[fs::path(m.from).filename().string()] = m.reason;
  }
  for (const auto& [name, bytes] : before) {
    CHECK_FALSE(fs::exists(dir + "/" + name));
    CHECK(read_file(dir + "/set-aside-run-a/" + name) == bytes);
  }
  CHECK(contains(reasons[daemon::checkpoint_file_name(40)], "this run's own checkpoint after"));
  CHECK(contains(reasons[daemon::checkpoint_file_name(50)], "checksum mismatch"));
  CHECK(contains(reasons[daemon::checkpoint_file_name(60)], "run run-b's checkpoint after"));
  CHECK(contains(reasons[daemon::checkpoint_file_name(70)], "has 64 parameters"));
  // What remains is the resumed file and the one before it.
  CHECK(iterations_in(dir) == std::vector<std::uint64_t>{10, 20});
  // Setting aside a name again (a later resume) keeps both copies.
  std::ofstream(dir + "/" + daemon::checkpoint_file_name(40), std::ios::binary) << "again";
  auto again = daemon::set_aside_after(env, dir, 20, expect(), "run-a");
  REQUIRE(again.is_ok());
  REQUIRE(again->size() == 1);
  CHECK(read_file(dir + "/set-aside-run-a/" + daemon::checkpoint_file_name(40) + ".1") == "again");
  CHECK(read_file(dir + "/set-aside-run-a/" + daemon::checkpoint_file_name(40)) ==
        before[daemon::checkpoint_file_name(40)]);
}

TEST_CASE_FIXTURE(
    NodeDir,
    "the owner of a directory moves a stranger's file of the same name aside before writing, "
    "anybody else is refused") {
  const std::string name = daemon::checkpoint_file_name(40);
  for (const std::string& stranger :
       {std::string("garbage"), daemon::encode_checkpoint(make(40, 100, "run-x"))}) {
    fs::remove_all(dir);
    fs::create_directories(dir);
    std::ofstream(dir + "/" + name, std::ios::binary) << stranger;
    auto refused = daemon::write_checkpoint(env, dir, make(40, 100, "run-b"), 2);
    REQUIRE_FALSE(refused.is_ok());
    CHECK(contains(refused.status().message(), "belongs to another run"));
    CHECK(read_file(dir + "/" + name) == stranger);
    auto owned = daemon::write_checkpoint(env, dir, make(40, 100, "run-b"), 2,
                                          /*owns_directory=*/true);
    REQUIRE_MESSAGE(owned.is_ok(), owned.status().to_string());
    auto mine = daemon::load_checkpoint_file(env, dir + "/" + name, expect());
    REQUIRE(mine.is_ok());
    CHECK(mine->run_id == "run-b");
    CHECK(read_file(dir + "/set-aside-run-b/" + name) == stranger);
  }
}

TEST_CASE(
    "kill -9 at random points while checkpointing: the newest completed checkpoint survives") {
  // A child writes checkpoints 1, 2, 3, ... (keep 2) and reports each completed write on a pipe;
  // the parent SIGKILLs it at a seeded random moment after the first. Whatever the moment, resume
  // must find a valid checkpoint at least as new as the last one reported, and an earlier run's
  // files (iterations 1000 and 1001, run-a) must all be there.
  TempDir tmp;
  Env& env = Env::system();
  Rng rng(2024, 5);
  int kills_mid_run = 0;
  for (int seed = 0; seed < 30; ++seed) {
    CAPTURE(seed);
    const std::string dir = tmp.path + "/seed-" + std::to_string(seed);
    for (std::uint64_t it : {1000, 1001}) {
      REQUIRE(daemon::write_checkpoint(env, dir, make(it, 4000, "run-a"), 5).is_ok());
    }
    const testing::ForkedChild writer = testing::fork_with_pipe([&](int fd) {
      for (std::uint64_t it = 1;; ++it) {
        if (!daemon::write_checkpoint(env, dir, make(it, 4000, "run-b"), 2).is_ok()) ::_exit(3);
        if (::write(fd, &it, sizeof it) != sizeof it) ::_exit(4);
      }
    });
    const pid_t pid = writer.pid;
    const int from_child = writer.read_fd;
    // Once the child's first checkpoint is out (so each kill lands amid a stream of writes, even
    // on a loaded machine), a random moment within the next few writes.
    std::uint64_t first = 0;
    REQUIRE(::read(from_child, &first, sizeof first) == sizeof first);
    std::this_thread::sleep_for(std::chrono::microseconds(rng.uniform_int(40000)));
    ::kill(pid, SIGKILL);
    int status = 0;
    ::waitpid(pid, &status, 0);
    CHECK(WIFSIGNALED(status));
    std::uint64_t last = first, it = 0;
    while (::read(from_child, &it, sizeof it) == sizeof it) last = it;
    ::close(from_child);
    if (last > 1) ++kills_mid_run;
    for (std::uint64_t a : {1000, 1001}) {
      auto old = daemon::load_checkpoint_file(env, dir + "/" + daemon::checkpoint_file_name(a),
                                              expect(4000));
      REQUIRE_MESSAGE(old.is_ok(), old.status().to_string());
      CHECK(old->run_id == "run-a");
    }
    // The newest valid run-b checkpoint: every file of run b below 1000, newest first.
    std::uint64_t newest_b = 0;
    for (std::uint64_t k : iterations_in(dir)) {
      if (k >= 1000) continue;
      auto c = daemon::load_checkpoint_file(env, dir + "/" + daemon::checkpoint_file_name(k),
                                            expect(4000));
      CHECK_MESSAGE(c.is_ok(), "a checkpoint file that is not whole: ", k);
      if (c.is_ok()) newest_b = std::max(newest_b, c->iteration);
    }
    CHECK(newest_b >= last);
    CHECK(newest_b <= last + 1);  // at most the one written but not yet reported
  }
  // Most kills came after pruning had started (keep 2: from the third checkpoint on).
  CHECK(kills_mid_run >= 12);
  MESSAGE(kills_mid_run, " of 30 kills after at least two checkpoints");
}

}  // namespace
}  // namespace gossip::fault_testing
