// Checkpoints: round trip, and every way a file can be bad is skipped (never loaded) with the
// newest good one returned instead: truncated, wrong magic, bad checksum, future version, wrong
// shape, leftover temporary files; a full disk is an error and leaves the previous checkpoint.
#include "daemon/checkpoint.h"

#include <doctest/doctest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>

#include "tests/support/files.h"

namespace gossip::daemon {
namespace {

using gossip::testing::TempDir;

Checkpoint make(std::uint64_t iteration, std::size_t n = 100) {
  Checkpoint c;
  c.node = 3;
  c.iteration = iteration;
  c.topology_fingerprint = "topo-fp";
  c.config_fingerprint = "cfg-fp";
  c.run_id = "run-a";
  c.sampler.rng_state = {1, 2, 3, 0xffffffffffffffffULL};
  c.sampler.epoch = 4;
  c.sampler.position = 17;
  c.sampler.batches = iteration;
  for (std::size_t i = 0; i < n; ++i)
    c.params.push_back(static_cast<float>(i) * 0.5f - 3.0f + iteration);
  c.optimizer_state.assign(n, -1.25f);
  return c;
}

CheckpointExpectation expect(std::size_t n = 100) { return {3, n, n, "topo-fp", "cfg-fp"}; }

void put(const std::string& path, const std::string& bytes) {
  REQUIRE(Env::system().write_file_atomic(path, bytes).is_ok());
}

TEST_CASE("encode/decode round trip is exact") {
  Checkpoint c = make(42);
  c.params[5] = -0.0f;
  c.params[6] = 1e-40f;  // subnormal
  auto d = decode_checkpoint(encode_checkpoint(c), "x");
  REQUIRE(d.is_ok());
  CHECK(d->node == 3);
  CHECK(d->iteration == 42);
  CHECK(d->sampler == c.sampler);
  CHECK(d->topology_fingerprint == "topo-fp");
  CHECK(d->run_id == "run-a");
  REQUIRE(d->params.size() == c.params.size());
  CHECK(std::memcmp(d->params.data(), c.params.data(), c.params.size() * 4) == 0);
  CHECK(d->optimizer_state == c.optimizer_state);
}

TEST_CASE("every single-byte corruption or truncation is detected") {
  std::string good = encode_checkpoint(make(7, 8));
  for (std::size_t i = 0; i < good.size(); ++i) {
    std::string bad = good;
    bad[i] ^= 0x5a;
    CHECK_MESSAGE(!decode_checkpoint(bad, "x").is_ok(), "flipped byte " << i);
  }
  for (std::size_t len = 0; len < good.size(); ++len) {
    CHECK_MESSAGE(!decode_checkpoint(good.substr(0, len), "x").is_ok(), "length " << len);
  }
  CHECK_FALSE(decode_checkpoint(good + "x", "x").is_ok());
}

TEST_CASE("write keeps the newest files and resume picks the newest valid one") {
  TempDir dir;
  Env& env = Env::system();
  for (std::uint64_t it : {10, 20, 30, 40}) {
    REQUIRE(write_checkpoint(env, dir.path, make(it), 3).is_ok());
  }
  auto names = env.list_dir(dir.path);
  REQUIRE(names.is_ok());
  CHECK(*names == std::vector<std::string>{checkpoint_file_name(20), checkpoint_file_name(30),
                                           checkpoint_file_name(40)});
  auto c = load_latest_checkpoint(env, dir.path, expect());
  REQUIRE(c.is_ok());
  CHECK(c->iteration == 40);
  CHECK(c->params == make(40).params);
}

TEST_CASE("corrupt, truncated, wrong-magic, future-version and wrong-shape files are skipped") {
  TempDir dir;
  Env& env = Env::system();
  REQUIRE(write_checkpoint(env, dir.path, make(10), 10).is_ok());
  std::string good = encode_checkpoint(make(20));

  std::string truncated = good.substr(0, good.size() / 2);
  put(dir.path + "/" + checkpoint_file_name(20), truncated);

  std::string flipped = encode_checkpoint(make(30));
  flipped[flipped.size() / 2] ^= 1;
  put(dir.path + "/" + checkpoint_file_name(30), flipped);

  std::string magic = encode_checkpoint(make(40));
  magic[0] = 'X';
  put(dir.path + "/" + checkpoint_file_name(40), magic);

  std::string future = encode_checkpoint(make(50));
  future[8] = static_cast<char>(kCheckpointVersion + 1);
  put(dir.path + "/" + checkpoint_file_name(50), future);

  put(dir.path + "/" + checkpoint_file_name(60), encode_checkpoint(make(60, 99)));  // wrong shape
  Checkpoint other_topology = make(70);
  other_topology.topology_fingerprint = "another";
  put(dir.path + "/" + checkpoint_file_name(70), encode_checkpoint(other_topology));
  Checkpoint misnamed = make(75);
  put(dir.path + "/" + checkpoint_file_name(80), encode_checkpoint(misnamed));
  // A leftover temporary file from a crash mid-write is never considered.
  put(dir.path + "/" + checkpoint_file_name(90) + ".tmp", encode_checkpoint(make(90)));
  put(dir.path + "/" + "notes.txt", "hello");
  put(dir.path + "/" + checkpoint_file_name(95), "");  // empty

  std::vector<std::string> skipped;
  auto c = load_latest_checkpoint(env, dir.path, expect(), &skipped);
  REQUIRE(c.is_ok());
  CHECK(c->iteration == 10);
  CHECK(skipped.size() == 8);

  auto future_status = decode_checkpoint(future, "f");
  CHECK(future_status.status().code() == StatusCode::kFailedPrecondition);
  CHECK(future_status.status().message().find("version") != std::string::npos);
  CHECK(decode_checkpoint(magic, "m").status().message().find("magic") != std::string::npos);
  CHECK(decode_checkpoint(flipped, "c").status().message().find("checksum") != std::string::npos);
  CHECK(decode_checkpoint(truncated, "t").status().message().find("truncated") !=
        std::string::npos);
}

TEST_CASE("no directory or no valid file is NotFound") {
  TempDir dir;
  auto none = load_latest_checkpoint(Env::system(), dir.path + "/missing", expect());
  CHECK(none.status().code() == StatusCode::kNotFound);
  put(dir.path + "/" + checkpoint_file_name(5), "garbage");
  CHECK(load_latest_checkpoint(Env::system(), dir.path, expect()).status().code() ==
        StatusCode::kNotFound);
}

// A disk that fills up after `budget` successful writes.
class FillingDiskEnv : public Env {
 public:
  explicit FillingDiskEnv(int budget) : budget_(budget) {}
  Status write_file_atomic(const std::string& path, std::string_view data) override {
    if (budget_-- <= 0) return io_error("writing " + path + ".tmp: No space left on device");
    return Env::system().write_file_atomic(path, data);
  }

 private:
  int budget_;
};

TEST_CASE("a full disk is reported and the previous checkpoint stays loadable") {
  TempDir dir;
  FillingDiskEnv env(1);
  REQUIRE(write_checkpoint(env, dir.path, make(10), 3).is_ok());
  auto w = write_checkpoint(env, dir.path, make(20), 3);
  REQUIRE_FALSE(w.is_ok());
  CHECK(w.status().code() == StatusCode::kIoError);
  CHECK(w.status().message().find("No space left") != std::string::npos);
  CHECK(w.status().message().find(checkpoint_file_name(20)) != std::string::npos);
  auto c = load_latest_checkpoint(env, dir.path, expect());
  REQUIRE(c.is_ok());
  CHECK(c->iteration == 10);
}

}  // namespace
}  // namespace gossip::daemon
