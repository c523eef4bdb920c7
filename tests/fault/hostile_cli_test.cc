// The hostile-user suite of issue 24 through the real programs (integration): for each class of
// bad input — checkpoint directories of other runs, outputs that are not regular files, writes
// that fail, sizes that cannot fit, inputs that never end, diverging runs, bytes that are not
// text — every case must end within seconds with a non-zero exit and a message naming the input,
// stay within bounded memory, and leave every file it was not asked to write as it was.
#include <sys/stat.h>

#include <algorithm>
#include <map>
#include <sstream>

#include "daemon/checkpoint.h"
#include "daemon/metrics.h"
#include "tests/fault/fault_test_util.h"
#include "tests/support/ports.h"

namespace gossip::fault_testing {
namespace {

std::string topo_bin() { return binary("topology/gossip-topo"); }
std::string gossipd_bin() { return binary("daemon/gossipd"); }
std::string sim_bin() { return binary("sim/gossip-sim"); }

constexpr long kMaxRssKb = 512 * 1024;  // "bounded memory": every refusal stays under 512 MiB

// Every run of this suite: no crash (a signal shows as 128 + n), done within seconds, bounded.
void check_bounded(const ProcessResult& r) {
  INFO("stderr: ", r.err);
  CHECK(r.code >= 0);
  CHECK(r.code < 128);
  CHECK(r.seconds < 20);
  CHECK(r.max_rss_kb < kMaxRssKb);
}

// `second` was refused at once (exit 2, within 5 s) because `in_use` ("checkpoint.dir: ...",
// "--workdir: ...") is held by `first`, whose pid the refusal names.
void check_refused_in_use(const ProcessResult& second, const std::string& in_use,
                          const BackgroundCli& first) {
  check_bounded(second);
  CHECK(second.code == 2);
  CHECK(second.seconds < 5);
  CHECK(contains(second.err, in_use + " is in use"));
  CHECK(contains(second.err, "(pid " + std::to_string(first.pid()) + " on host "));
}

bool has_control_bytes(const std::string& s) {
  for (char c : s) {
    const unsigned char u = static_cast<unsigned char>(c);
    if ((u < 0x20 && u != '\n') || u == 0x7f) return true;
  }
  return false;
}

// Two free loopback ports for this process (ctest runs the cases as parallel processes).
int base_port() {
  static const int port = free_loopback_ports(2, 30000 + static_cast<int>(::getpid() % 20000));
  return port > 0 ? port : 39413;
}
std::string node_line(int id) {
  return "node { id: " + std::to_string(id) +
         " address: \"127.0.0.1:" + std::to_string(base_port() + id) + "\" }\n";
}
// One node, no neighbours: a whole gossipd run in well under a second.
const std::string kOne = node_line(0);
const std::string kConfig =
    small_train_config(40, "checkpoint { every: 10 keep: 2 dir: \"ck\" }\n");

ProcessResult gossipd(const TempDir& d, const std::vector<std::string>& extra,
                      const std::string& topology = kOne, const std::string& config = kConfig,
                      const ProcessExtras& extras = {}) {
  std::vector<std::string> argv = {
      gossipd_bin(), "run",      d.write("topo.pbtxt", topology), "--node",
      "0",           "--config", d.write("train.pbtxt", config),  "--insecure"};
  argv.insert(argv.end(), extra.begin(), extra.end());
  return run_process(argv, 30, d.path, extras);
}

// name -> bytes of every file under dir (recursively), to prove nothing changed. The directory's
// LOCK file (daemon/dir_lock.h) is left out: every run that holds the directory writes its line.
std::map<std::string, std::string> snapshot(const std::string& dir) {
  std::map<std::string, std::string> out;
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    if (e.is_regular_file() && e.path().filename() != "LOCK")
      out[fs::relative(e.path(), dir).string()] = read_file(e.path().string());
  }
  return out;
}

// The config with its timeouts line replaced by `t`.
std::string with_timeouts(const std::string& t) {
  std::string c = kConfig;
  const std::string old = "timeouts { connect_ms: 2000 deadline_ms: 1000 heartbeat_ms: 200 }\n";
  return c.replace(c.find(old), old.size(), t);
}
// Two nodes whose node 1 is started late (or never): node 0 waits up to 20 s for it.
const std::string kTwo = node_line(0) + node_line(1) + "edge { from: 0 to: 1 }\n";
const std::string kWaiting = with_timeouts("timeouts { connect_ms: 20000 }\n");

// The checkpoint files of dir (names), and the run id each carries.
std::map<std::string, std::string> checkpoint_runs(const std::string& dir) {
  std::map<std::string, std::string> runs;
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    if (name.rfind("ckpt-", 0) != 0) continue;
    auto c = daemon::decode_checkpoint(read_file(e.path().string()), name);
    runs[name] = c.is_ok() ? c->run_id : "(unreadable: " + c.status().to_string() + ")";
  }
  return runs;
}

// ---- class 1: data loss in checkpoints

TEST_CASE("checkpoints: a fresh run refuses a directory holding an earlier run's checkpoints") {
  TempDir d;
  const ProcessResult first = gossipd(d, {});
  check_bounded(first);
  REQUIRE(first.code == 0);
  const auto before = snapshot(d.path + "/ck/node-0");
  CHECK(before.count("ckpt-000000000040.bin") == 1);
  CHECK(before.count("ckpt-000000000030.bin") == 1);
  // Same command again, and with more iterations (the case that deleted each new checkpoint).
  for (const std::vector<std::string>& extra :
       {std::vector<std::string>{}, std::vector<std::string>{"--iterations", "20"}}) {
    const ProcessResult again = gossipd(d, extra);
    check_bounded(again);
    CHECK(again.code == 2);
    CHECK(contains(again.err, "ck/node-0 already holds 2 checkpoint file(s)"));
    CHECK(contains(again.err, "--resume"));
    CHECK_FALSE(contains(again.err, "connected to"));  // refused before the transport started
    std::map<std::string, std::string> after = snapshot(d.path + "/ck/node-0");
    after.erase("metrics.jsonl");
    std::map<std::string, std::string> expect = before;
    expect.erase("metrics.jsonl");
    CHECK(after == expect);
  }
  // --resume continues the run; its own older checkpoints are pruned (keep 2), the newest stays.
  const ProcessResult resumed = gossipd(d, {"--resume", "--iterations", "60"});
  check_bounded(resumed);
  CHECK(resumed.code == 0);
  CHECK(contains(resumed.err, "resumed from checkpoint at iteration 40"));
  const auto now = snapshot(d.path + "/ck/node-0");
  CHECK(now.count("ckpt-000000000060.bin") == 1);
  CHECK(now.count("ckpt-000000000050.bin") == 1);
  CHECK(now.count("ckpt-000000000040.bin") == 0);
}

TEST_CASE("checkpoints: --resume with every checkpoint damaged, or the config changed, exits 6") {
  TempDir d;
  REQUIRE(gossipd(d, {}).code == 0);
  const std::string dir = d.path + "/ck/node-0";
  // Config changed: nothing usable, nothing touched.
  const auto before = snapshot(dir);
  const ProcessResult changed = gossipd(d, {"--resume", "--lr", "0.2"});
  check_bounded(changed);
  CHECK(changed.code == 6);
  CHECK(contains(changed.err, "written for a different training config"));
  CHECK(contains(changed.err, "--resume-or-start"));
  CHECK(snapshot(dir) == before);
  // --resume-at an iteration that does not exist.
  const ProcessResult at = gossipd(d, {"--resume-at", "35"});
  check_bounded(at);
  CHECK(at.code == 6);
  CHECK(contains(at.err, "ckpt-000000000035.bin"));
  // Refused before any neighbour is contacted: node 1 of this topology never starts, yet the
  // answer is 6 (cannot resume), not 3 (a neighbour missing after timeouts.connect_ms).
  const ProcessResult alone =
      gossipd(d, {"--resume-at", "35"}, node_line(0) + node_line(1) + "edge { from: 0 to: 1 }\n");
  check_bounded(alone);
  CHECK(alone.code == 6);
  CHECK_FALSE(contains(alone.err, "listening on"));
  // Every checkpoint damaged (one flipped byte each).
  for (const auto& [name, bytes] : before) {
    if (name.rfind("ckpt-", 0) != 0) continue;
    std::string b = bytes;
    b[b.size() / 2] ^= 0x40;
    std::ofstream(dir + "/" + name, std::ios::binary) << b;
  }
  const auto damaged = snapshot(dir);
  const ProcessResult bad = gossipd(d, {"--resume"});
  check_bounded(bad);
  CHECK(bad.code == 6);
  CHECK(contains(bad.err, "checksum mismatch"));
  CHECK(contains(bad.err, "2 checkpoint file(s) skipped"));
  CHECK(snapshot(dir) == damaged);
  // --resume-or-start starts from 0 and keeps the damaged files, byte for byte, set aside.
  const ProcessResult fresh = gossipd(d, {"--resume-or-start"});
  check_bounded(fresh);
  CHECK(fresh.code == 0);
  CHECK(contains(fresh.err, "starting from iteration 0"));
  std::string aside;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.path().filename().string().rfind("set-aside-", 0) == 0) aside = e.path().string();
  }
  REQUIRE_FALSE(aside.empty());
  for (const auto& [name, bytes] : damaged) {
    if (name.rfind("ckpt-", 0) == 0) CHECK(read_file(aside + "/" + name) == bytes);
  }
}

TEST_CASE("checkpoints: SIGTERM while waiting for neighbours is a stop (4), not a timeout (3)") {
  TempDir d;
  const std::string two = kOne + node_line(1) + "edge { from: 0 to: 1 }\n";
  auto with_timeouts = [](const std::string& t) {
    std::string c = kConfig;
    const std::string old = "timeouts { connect_ms: 2000 deadline_ms: 1000 heartbeat_ms: 200 }\n";
    return c.replace(c.find(old), old.size(), t);
  };
  const std::string slow = with_timeouts("timeouts { connect_ms: 20000 }\n");
  ProcessExtras term;
  term.signal = SIGTERM;
  // Late enough that gossipd has its handlers and is waiting on a loaded machine (at 700 ms a
  // busy 2-core machine still had it starting up: killed by the default action, 143).
  term.signal_after_ms = 3000;
  const ProcessResult r = gossipd(d, {}, two, slow, term);
  check_bounded(r);
  CHECK(r.code == 4);
  CHECK(contains(r.err, "stop requested (signal) while waiting for the neighbours"));
  CHECK_FALSE(contains(r.err, "not connected within"));
  // CARRY_ON with the neighbour absent: "only 0 of 1", never "connected to 1 neighbours".
  const std::string carry =
      with_timeouts("timeouts { connect_ms: 300 }\nfault { policy: CARRY_ON }\n");
  TempDir d2;
  const ProcessResult c = gossipd(d2, {}, two, carry);
  check_bounded(c);
  CHECK(contains(c.err, "only 0 of 1 neighbours connected"));
  CHECK_FALSE(contains(c.err, "connected to 1 neighbours"));
}

TEST_CASE(
    "directories: a second run on a checkpoint directory in use is refused at once, naming the "
    "first, and the first ends with exactly its own files") {
  TempDir d;
  // The first run (node 0 of a two-node job) holds ck/node-0 while it waits for node 1.
  BackgroundCli first({gossipd_bin(), "run", d.write("two.pbtxt", kTwo), "--node", "0", "--config",
                       d.write("waiting.pbtxt", kWaiting), "--insecure"},
                      d.path);
  REQUIRE_MESSAGE(first.wait_for("listening on", 15), first.err());
  const auto before = snapshot(d.path + "/ck/node-0");
  // Another job (one node, another port) with the same relative checkpoint.dir, from the same
  // working directory.
  const ProcessResult second = gossipd(
      d, {}, "node { id: 0 address: \"127.0.0.1:" + std::to_string(base_port() + 1) + "\" }\n");
  check_refused_in_use(second, "checkpoint.dir: ck/node-0 (" + d.path + "/ck/node-0)", first);
  CHECK(contains(second.err, " since 20"));
  CHECK(contains(second.err, "gossipd node 0, run "));
  CHECK(contains(second.err, "give this run its own checkpoint.dir"));
  CHECK_FALSE(contains(second.err, "listening on"));
  CHECK(snapshot(d.path + "/ck/node-0") == before);  // nothing written, opened or truncated
  // Node 1 comes; the first run trains to the end.
  TempDir d1;
  const ProcessResult node1 = run_process({gossipd_bin(), "run", d.file("two.pbtxt"), "--node", "1",
                                           "--config", d.file("waiting.pbtxt"), "--insecure"},
                                          30, d1.path);
  CHECK(node1.code == 0);
  const ProcessResult done = first.finish();
  INFO(done.err);
  REQUIRE(done.code == 0);
  // Exactly its own files: its checkpoints (keep 2) all of one run, the run the refusal named; one
  // metrics file whose iterations run once from the start to 40.
  const auto runs = checkpoint_runs(d.path + "/ck/node-0");
  CHECK(runs.size() == 2);
  for (const auto& [name, id] : runs) {
    CAPTURE(name);
    CHECK(contains(second.err, "run " + id));
  }
  std::vector<double> iterations;
  std::istringstream metrics(read_file(d.path + "/ck/node-0/metrics.jsonl"));
  for (std::string line; std::getline(metrics, line);) {
    auto m = daemon::parse_flat_json(line);
    REQUIRE(m.is_ok());
    CHECK((*m)["node"].number == 0);
    if ((*m)["type"].text == "iter") iterations.push_back((*m)["iteration"].number);
  }
  REQUIRE_FALSE(iterations.empty());
  CHECK(std::is_sorted(iterations.begin(), iterations.end()));
  CHECK(std::adjacent_find(iterations.begin(), iterations.end()) == iterations.end());
  CHECK(iterations.back() == 40);
  for (const auto& e : fs::directory_iterator(d.path + "/ck/node-0")) {
    const std::string name = e.path().filename().string();
    CHECK_MESSAGE((name == "LOCK" || name == "metrics.jsonl" || runs.count(name)), name);
  }
}

TEST_CASE("directories: a lock left by a gossipd killed with SIGKILL does not block the next run") {
  TempDir d;
  {
    BackgroundCli doomed({gossipd_bin(), "run", d.write("two.pbtxt", kTwo), "--node", "0",
                          "--config", d.write("waiting.pbtxt", kWaiting), "--insecure"},
                         d.path);
    REQUIRE_MESSAGE(doomed.wait_for("listening on", 15), doomed.err());
    ::kill(doomed.pid(), SIGKILL);
    CHECK(doomed.finish().code == 128 + SIGKILL);
  }
  CHECK(contains(read_file(d.path + "/ck/node-0/LOCK"), "gossipd node 0"));  // its line stays
  const ProcessResult next = gossipd(d, {});
  check_bounded(next);
  CHECK(next.code == 0);
  CHECK(read_file(d.path + "/ck/node-0/LOCK").empty());  // released at its exit
}

TEST_CASE(
    "checkpoints: --resume past a damaged newest checkpoint finishes (exit 0) with its final "
    "checkpoint and --dump-params, bit for bit as uninterrupted, the damaged file set aside") {
  TempDir d;
  const ProcessResult whole = gossipd(d, {"--dump-params", "whole"});
  REQUIRE(whole.code == 0);
  const std::string dir = d.path + "/ck/node-0", newest = "ckpt-000000000040.bin";
  // Its first block zeroed (as a torn write or a bad sector leaves it): not even its header, so
  // not its run id, can be read.
  std::string damaged = read_file(dir + "/" + newest);
  std::fill(damaged.begin(), damaged.begin() + 64, '\0');
  std::ofstream(dir + "/" + newest, std::ios::binary) << damaged;
  const ProcessResult resumed = gossipd(d, {"--resume", "--dump-params", "out"});
  check_bounded(resumed);
  INFO(resumed.err);
  CHECK(resumed.code == 0);
  CHECK(contains(resumed.err, "resumed from checkpoint at iteration 30"));
  CHECK(contains(resumed.err, "set aside ck/node-0/" + newest));
  CHECK(contains(resumed.err, "not a gossipd checkpoint"));
  CHECK(read_file(d.path + "/out/node_0.f32") == read_file(d.path + "/whole/node_0.f32"));
  // Its final checkpoint is in place and valid; the damaged bytes are kept.
  auto final_ckpt = daemon::decode_checkpoint(read_file(dir + "/" + newest), newest);
  CHECK(final_ckpt.is_ok());
  std::string kept;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.path().filename().string().rfind("set-aside-", 0) == 0) {
      kept = read_file(e.path().string() + "/" + newest);
    }
  }
  CHECK(kept == damaged);
  // The same from --resume-at 30 with the run's own valid checkpoint at 40 in the way.
  const ProcessResult at = gossipd(d, {"--resume-at", "30", "--dump-params", "at"});
  CHECK(at.code == 0);
  CHECK(contains(at.err, "this run's own checkpoint after the resumed iteration 30"));
  CHECK(read_file(d.path + "/at/node_0.f32") == read_file(d.path + "/whole/node_0.f32"));
}

TEST_CASE(
    "directories: a second launch on a workdir in use is refused at once, naming the first, and "
    "the first's files are untouched") {
  TempDir d;
  const std::string topo = d.write("one.pbtxt", kOne), cfg = d.write("c.pbtxt", kWaiting);
  // The first launch's node waits for a trainer that never comes.
  BackgroundCli first({gossipd_bin(), "launch", topo, "--config", cfg, "--insecure", "--workdir",
                       "w", "--attach-dir", d.path + "/sock"},
                      d.path);
  REQUIRE_MESSAGE(first.wait_for("waiting up to", 15, d.path + "/w/node-0/log.txt"),
                  (first.out() + first.err()));
  const std::string pid_file = read_file(d.path + "/w/node-0/pid");
  const std::string log = read_file(d.path + "/w/node-0/log.txt");
  const ProcessResult second =
      run_process({gossipd_bin(), "launch", topo, "--config", cfg, "--insecure", "--workdir", "w",
                   "--set", "checkpoint.dir=other"},
                  30, d.path);
  check_refused_in_use(second, "--workdir: w (" + d.path + "/w)", first);
  CHECK(contains(second.err, "gossipd launch"));
  CHECK(read_file(d.path + "/w/node-0/pid") == pid_file);
  CHECK(read_file(d.path + "/w/node-0/log.txt").rfind(log, 0) == 0);
  CHECK_FALSE(fs::exists(d.path + "/other"));
  ::kill(first.pid(), SIGTERM);
  first.finish();
}

// ---- class 2: outputs never replace what is not a regular file; failed writes are errors

TEST_CASE("outputs: -o and final_params_path refuse a FIFO, a directory and a symbolic link") {
  TempDir d;
  const std::string fifo = d.file("fifo"), sub = d.file("sub"), target = d.file("target"),
                    link = d.file("link");
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  fs::create_directories(sub);
  d.write("target", "precious");
  fs::create_symlink(target, link);
  for (const std::string& out : {fifo, sub, link}) {
    CAPTURE(out);
    const ProcessResult r = run_process(
        {topo_bin(), "optimize", "--kind", "ring", "--nodes", "6", "--iterations", "5", "-o", out});
    check_bounded(r);
    CHECK(r.code == 1);
    CHECK(contains(r.err, out + " exists and is"));
    CHECK(contains(r.err, "not a regular file"));
  }
  CHECK(fs::is_fifo(fifo));
  CHECK(fs::is_directory(sub));
  CHECK(fs::is_symlink(link));
  CHECK(read_file(target) == "precious");
  // gossipd's final_params_path: refused before training (exit 2; the next case has the rest).
  const ProcessResult g = gossipd(d, {"--set", "final_params_path=" + fifo});
  check_bounded(g);
  CHECK(g.code == 2);
  CHECK(contains(g.err, "final_params_path: " + fifo + " exists and is a FIFO"));
  CHECK(fs::is_fifo(fifo));
}

TEST_CASE(
    "outputs: every output a run cannot write is refused at once (exit 2) naming the field and "
    "the path, before any neighbour, nothing trained, and by launch before any node starts") {
  TempDir d;
  const std::string fifo = d.file("fifo"), sub = d.file("sub"), file = d.write("file", "x");
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  fs::create_directories(sub);
  struct Case {
    std::vector<std::string> flags;
    std::string field, path;
  };
  const std::vector<Case> cases = {
      {{"--set", "final_params_path=/dev/null"}, "final_params_path", "/dev/null"},
      {{"--set", "final_params_path=/dev/full"}, "final_params_path", "/dev/full"},
      {{"--set", "final_params_path=" + sub}, "final_params_path", sub},
      {{"--set", "final_params_path=" + fifo}, "final_params_path", fifo},
      {{"--set", "final_params_path=" + file + "/x-{node}.bin"},
       "final_params_path",
       file + "/x-0.bin"},
      {{"--set", "checkpoint.dir=" + file}, "checkpoint.dir", file + "/node-0"},
      {{"--set", "checkpoint.dir=/proc/gossip-nowhere"},
       "checkpoint.dir",
       "/proc/gossip-nowhere/node-0"},
      {{"--metrics", sub}, "--metrics", sub},
      {{"--metrics", file + "/m.jsonl"}, "--metrics", file + "/m.jsonl"},
      {{"--dump-params", file}, "--dump-params", file},
  };
  for (const Case& c : cases) {
    CAPTURE(c.path);
    TempDir run;
    // Node 1 never comes: a check made only after the 20 s connect wait would take 20 s.
    const ProcessResult r = gossipd(run, c.flags, kTwo, kWaiting);
    check_bounded(r);
    CHECK(r.code == 2);
    CHECK(r.seconds < 5);
    CHECK(contains(r.err, "gossipd run: "));
    CHECK(contains(r.err, c.field + ": "));
    CHECK(contains(r.err, c.path));
    CHECK_FALSE(contains(r.err, "listening on"));
    CHECK_FALSE(fs::exists(run.path + "/ck/node-0/metrics.jsonl"));
  }
  CHECK(fs::is_fifo(fifo));
  CHECK(read_file(file) == "x");
  // launch refuses the same before it starts a node.
  const ProcessResult l = run_process(
      {gossipd_bin(), "launch", d.write("t.pbtxt", kOne), "--config", d.write("c.pbtxt", kConfig),
       "--insecure", "--workdir", "w", "--set", "final_params_path=/dev/null"},
      30, d.path);
  check_bounded(l);
  CHECK(l.code == 2);
  CHECK(contains(l.err, "node 0: final_params_path: /dev/null"));
  CHECK_FALSE(fs::exists(d.path + "/w/node-0/log.txt"));
}

TEST_CASE("outputs: a failed write on standard output is an error (> /dev/full)") {
  ProcessExtras full;
  full.stdout_path = "/dev/full";
  const std::vector<std::vector<std::string>> cmds = {
      {topo_bin(), "generate", "ring", "--nodes", "8"},
      {topo_bin(), "generate", "ring", "--nodes", "5000"},  // more than one stdio buffer
      {topo_bin(), "analyze", "--kind", "ring", "--nodes", "8", "--json"},
      {topo_bin(), "export", "--kind", "torus", "--rows", "3", "--cols", "3", "--dot"},
      {sim_bin(), "run", "--problem", "least_squares", "--nodes", "4", "--iterations", "20",
       "--quiet", "--compute-time", "1ms"},
  };
  for (const auto& argv : cmds) {
    CAPTURE(argv[1]);
    const ProcessResult r = run_process(argv, 30, "", full);
    check_bounded(r);
    CHECK(r.code == 1);
    CHECK(contains(r.err, "writing standard output: No space left on device"));
  }
}

TEST_CASE("outputs: a metrics file that cannot be written fails the run (exit 1)") {
  TempDir d;
  const ProcessResult r = gossipd(d, {"--metrics", "/dev/full"});
  check_bounded(r);
  CHECK(r.code == 1);
  CHECK(contains(r.err, "writing metrics to /dev/full: No space left on device"));
  // Control: the same run with a writable metrics file exits 0.
  TempDir ok;
  CHECK(gossipd(ok, {"--metrics", ok.file("m.jsonl")}).code == 0);
}

// ---- class 3: sizes that cannot fit are refused before allocation, never std::bad_alloc

TEST_CASE("sizes: an MLP too large for memory, or for --memory-cap, exits 2 before joining") {
  TempDir d;
  const std::string mlp =
      "seed: 5\nmodel { kind: MLP hidden: 100000 hidden: 100000 }\n"
      "data { dataset: SYNTHETIC_LOGISTIC num_examples: 64 dim: 8 test_examples: 16 }\n"
      "optimizer { kind: SGD lr: 0.1 }\nbatch_size: 16\niterations: 5\n";
  const ProcessResult big = gossipd(d, {}, kOne, mlp);
  check_bounded(big);
  CHECK(big.code == 2);
  CHECK(contains(big.err, "parameters"));
  CHECK(contains(big.err, "of memory"));
  CHECK_FALSE(contains(big.err, "bad_alloc"));
  CHECK_FALSE(contains(big.err, "connected"));  // refused before the transport started
  // 9 parameters (dim 8 + bias) x 4 bytes x 8 buffers (no neighbours) = 288 bytes.
  const ProcessResult capped = gossipd(d, {"--memory-cap", "100"});
  check_bounded(capped);
  CHECK(capped.code == 2);
  CHECK(contains(capped.err, "--memory-cap"));
  CHECK(contains(capped.err, "needs 288 B of memory, more than the cap of 100 B"));
  // gossip-sim: huge synthetic sizes and huge hidden layers.
  for (const std::vector<std::string>& extra :
       {std::vector<std::string>{"--train-examples", "100000000000"},
        std::vector<std::string>{"--dim", "2000000000"},
        std::vector<std::string>{"--model", "mlp", "--hidden", "100000,100000"}}) {
    std::vector<std::string> argv = {sim_bin(), "run",          "--problem", "logistic", "--nodes",
                                     "4",       "--iterations", "5",         "--quiet"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    CAPTURE(extra[0]);
    const ProcessResult r = run_process(argv);
    check_bounded(r);
    CHECK(r.code != 0);
    CHECK(contains(r.err, "of memory"));
    CHECK_FALSE(contains(r.err, "bad_alloc"));
  }
}

TEST_CASE("sizes: generators refuse what cannot fit and validate their parameters") {
  struct Case {
    std::vector<std::string> args;
    std::string what;
  };
  const std::vector<Case> cases = {
      {{"complete", "--nodes", "20000"}, "of memory"},
      {{"complete", "--nodes", "1000000"}, "edges for nodes: 1000000"},
      {{"erdos_renyi", "--nodes", "50", "-p", "nan"}, "finite p"},
      {{"erdos_renyi", "--nodes", "50", "-p", "inf"}, "finite p"},
      {{"erdos_renyi", "--nodes", "50", "-p", "0"}, "0 < p <= 1"},
      {{"erdos_renyi", "--nodes", "50", "-p", "1.5"}, "0 < p <= 1"},
      {{"erdos_renyi", "--nodes", "50", "-p", "1e-300"}, "is not connected"},
      {{"random_regular", "--nodes", "6", "--degree", "6"}, "a node has at most nodes - 1 = 5"},
  };
  for (const Case& c : cases) {
    std::vector<std::string> argv = {topo_bin(), "generate"};
    argv.insert(argv.end(), c.args.begin(), c.args.end());
    CAPTURE(c.what);
    const ProcessResult r = run_process(argv);
    check_bounded(r);
    CHECK(r.code == 2);
    CHECK(contains(r.err, c.what));
  }
  // A size that is allowed but slow or large is announced on stderr before the work starts,
  // with its edge count and memory; a small one says nothing.
  const ProcessResult big = run_process({topo_bin(), "generate", "complete", "--nodes", "20000"});
  check_bounded(big);
  CHECK(contains(big.err, "note: complete with 20000 nodes has about 199990000 edges"));
  CHECK(contains(big.err, "32.0 GB"));
  const ProcessResult small = run_process({topo_bin(), "generate", "ring", "--nodes", "8"});
  CHECK(small.code == 0);
  CHECK(small.err.empty());
  // Degree n-1 is the complete graph (it was reported as impossible).
  const ProcessResult rr = run_process({topo_bin(), "analyze", "--kind", "random_regular",
                                        "--nodes", "7", "--degree", "6", "--json"});
  check_bounded(rr);
  CHECK(rr.code == 0);
  CHECK(contains(rr.out, "\"edges\": 21"));
}

// ---- class 4: inputs that are not regular files or too large

TEST_CASE("inputs: devices, FIFOs and directories are refused at once by all three programs") {
  TempDir d;
  const std::string fifo = d.file("fifo");
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  for (const std::string& in : {std::string("/dev/zero"), fifo, d.path}) {
    CAPTURE(in);
    const ProcessResult v = run_process({topo_bin(), "validate", in});
    check_bounded(v);
    CHECK(v.code == 1);
    CHECK(contains(v.err, in));
    const ProcessResult g = run_process({gossipd_bin(), "run", in, "--node", "0", "--config",
                                         d.write("c.pbtxt", kConfig), "--insecure"});
    check_bounded(g);
    CHECK(g.code == 2);
    CHECK(contains(g.err, in));
    const ProcessResult c = run_process({gossipd_bin(), "run", d.write("t.pbtxt", kOne), "--node",
                                         "0", "--config", in, "--insecure"});
    check_bounded(c);
    CHECK(c.code == 2);
    CHECK(contains(c.err, in));
    const ProcessResult s = run_process({sim_bin(), "run", "--topology", in, "--problem",
                                         "least_squares", "--quiet", "--compute-time", "1ms"});
    check_bounded(s);
    CHECK(s.code != 0);
    CHECK(contains(s.err, in));
  }
}

// ---- class 5: wrong results with exit 0

TEST_CASE("divergence: gossipd and gossip-sim stop with exit 5 and write no NaN anywhere") {
  TempDir d;
  const ProcessResult g = gossipd(d, {"--lr", "1e300", "--dump-params", "out"});
  check_bounded(g);
  CHECK(g.code == 5);
  CHECK(contains(g.err, "training diverged at iteration"));
  CHECK_FALSE(fs::exists(d.path + "/out"));
  CHECK(snapshot(d.path + "/ck/node-0").count("metrics.jsonl") == 1);
  CHECK(snapshot(d.path + "/ck/node-0").size() == 1);  // no checkpoint at all
  // Diverging after some good checkpoints: they stay, the newest is still loadable by --resume.
  TempDir d2;
  REQUIRE(gossipd(d2, {"--iterations", "20"}).code == 0);
  const ProcessResult g2 = gossipd(d2, {"--resume", "--iterations", "40", "--lr", "1e300"});
  check_bounded(g2);
  CHECK(g2.code == 6);  // the lr is part of the config: the good checkpoints are another config's
  const ProcessResult s =
      run_process({sim_bin(), "run", "--problem", "least_squares", "--nodes", "4", "--iterations",
                   "200", "--lr", "1e6", "--quiet", "--compute-time", "1ms"});
  check_bounded(s);
  CHECK(s.code == 5);
  CHECK(contains(s.err, "training diverged at iteration"));
}

TEST_CASE("json: --json output is valid JSON for file names and names with any bytes") {
  TempDir d;
  const std::vector<std::string> names = {"tab\there.pbtxt", "nl\nI forged.pbtxt",
                                          "esc\x1b[31m.pbtxt", "bad\xff\xfe.pbtxt",
                                          "quote\"back\\slash.pbtxt"};
  std::string lines;
  for (const std::string& n : names) {
    const std::string path = d.write(n, kOne);
    const ProcessResult r = run_process({topo_bin(), "validate", "--json", path});
    check_bounded(r);
    CHECK(r.code == 0);
    CHECK_FALSE(has_control_bytes(r.out));
    lines += r.out;
    // Text output and messages escape the same bytes: one line each, no terminal escapes.
    const ProcessResult t = run_process({topo_bin(), "validate", path});
    CHECK(t.code == 0);
    CHECK_FALSE(has_control_bytes(t.out));
    CHECK(std::count(t.out.begin(), t.out.end(), '\n') == 1);
  }
  if (fs::exists("/usr/bin/python3")) {
    const std::string file = d.write("lines.json", lines);
    const std::string cmd =
        "/usr/bin/python3 -c \"import json,sys\nfor l in open(sys.argv[1], "
        "encoding='utf-8'): json.loads(l)\" " +
        file;
    CHECK(gossip::testing::run_shell(cmd) == 0);
  }
}

// ---- class 6: log forging

TEST_CASE("logs: strings from outside cannot start a forged log line or send escapes") {
  TempDir d;
  // A config value and a file name carrying a newline, a fake log prefix and a terminal escape.
  const std::string evil = "x\nI 00:00:00.000 [node 0] forged\x1b[2J";
  d.write("file", "a regular file, so no directory can be made below it");
  const ProcessResult m = gossipd(d, {"--metrics", d.path + "/file/" + evil + "/m.jsonl", "--set",
                                      "checkpoint.dir=" + d.path + "/ck2"});
  check_bounded(m);
  CHECK(m.code == 2);  // the metrics path is checked at start: a usage error
  CHECK_FALSE(contains(m.err, "\nI 00:00:00.000 [node 0] forged"));
  // A usage error shows each line of its message on its own line, continuation lines indented,
  // so the newline cannot start a line that looks like a log line.
  CHECK(contains(m.err, "\n  I 00:00:00.000 [node 0] forged\\x1b[2J"));
  CHECK_FALSE(has_control_bytes(m.err));
  const ProcessResult t = run_process({topo_bin(), "validate", d.path + "/" + evil});
  check_bounded(t);
  CHECK(t.code == 1);
  CHECK_FALSE(has_control_bytes(t.err));
  CHECK(std::count(t.err.begin(), t.err.end(), '\n') == 1);
}

}  // namespace
}  // namespace gossip::fault_testing
