// Local steps, the outer optimizer and compression in gossipd, as real processes on loopback:
//  - exactness: for every algorithm (local-step gossip, DiLoCo) and compression (none, bf16, int8;
//    CHOCO for gossip, error feedback for DiLoCo), outer optimizer, overlap and a time-varying
//    graph, `gossipd launch` of 4 nodes equals `gossip-sim run --config` on the same file bit for
//    bit, node by node (scripts/test.sh reruns these with the CPU kernels forced to each lower
//    level);
//  - resume: a run resumed from a checkpoint taken mid-round (anchor, outer momentum, CHOCO copies,
//    error-feedback residual and a mean in flight all in it) ends bit for bit where the run without
//    the stop ends;
//  - bytes: what the metrics count per round is the compressed message (none > bf16 > int8);
//  - mismatch: nodes with different round settings refuse each other at the handshake naming the
//    field.
#include <filesystem>
#include <fstream>
#include <string>

#include "tests/daemon/gossipd_harness.h"

namespace gossip::daemon::harness {
namespace {

// The harness's job with round settings appended (text format, after the harness's fields).
struct RoundJob {
  Job job;
  std::string rounds;  // e.g. "local_steps: 4 compression { kind: INT8 }"
  std::string text() const { return job.config_text() + rounds + "\n"; }
};

// gossipd launch of `kind` with n nodes and gossip-sim --config on the same files; returns the
// work directory (under `dir`) after checking that both agree bit for bit.
std::string launch_and_simulate(const TempDir& dir, const RoundJob& job, const std::string& kind,
                                int n) {
  const std::string cfg = dir.path + "/train.pbtxt";
  std::ofstream(cfg) << job.text();
  const std::string work = dir.path + "/run";
  std::string topo;
  const int rc = launch_retrying_ports(dir.path, kind, n, work, &topo, [&](const std::string& t) {
    return launch_command(dir.path, t, cfg, work, dir.path + "/ckpt") + " > " + dir.path +
           "/launch.out 2>&1";
  });
  INFO(read_file(dir.path + "/launch.out"));
  REQUIRE(rc == kExitOk);
  const bool allreduce = job.rounds.find("ALLREDUCE") != std::string::npos;
  const Run sim = run_shell_capture(bin("sim/gossip-sim") + " run --algorithm " +
                                    (allreduce ? "cpsgd-allreduce" : "dpsgd") + " --topology " +
                                    topo + " --nodes " + std::to_string(n) + " --config " + cfg +
                                    " --quiet --dump-params " + dir.path + "/sim");
  INFO(sim.out);
  REQUIRE(sim.code == 0);
  check_equal_to_sim(work + "/final", dir.path + "/sim", n);
  // Not vacuous: the models moved from x_0 (and, for gossip, differ between nodes).
  if (!allreduce) {
    CHECK(read_f32(work + "/final/node_0.f32") != read_f32(work + "/final/node_1.f32"));
  }
  return work;
}

void exact(const std::string& rounds, const std::string& kind = "RING") {
  TempDir dir;
  RoundJob job;
  job.rounds = rounds;
  launch_and_simulate(dir, job, kind, 4);
}

}  // namespace

TEST_CASE("exactness: local-step gossip, H = 5, plain (ring of 4)") { exact("local_steps: 5"); }

TEST_CASE("exactness: local-step gossip, H = 5, outer Nesterov (ring of 4)") {
  exact("local_steps: 5 outer { kind: NESTEROV }");
}

TEST_CASE("exactness: local-step gossip, H = 4, int8 CHOCO (ring of 4)") {
  exact("local_steps: 4 compression { kind: INT8 block_floats: 32 }");
}

TEST_CASE("exactness: local-step gossip, H = 3, bf16 CHOCO step 0.5, outer SGD (ring of 4)") {
  exact(
      "local_steps: 3 compression { kind: BF16 choco_step: 0.5 } outer { kind: SGD lr: 0.9 "
      "momentum: 0.5 }");
}

TEST_CASE("exactness: CHOCO-SGD, H = 1, int8 (one-peer exponential graph of 4, time-varying)") {
  exact("local_steps: 1 compression { kind: INT8 block_floats: 16 }", "ONE_PEER_EXPONENTIAL");
}

TEST_CASE("exactness: local-step gossip, H = 4, int8 CHOCO, outer Nesterov (one-peer, 4)") {
  exact("local_steps: 4 compression { kind: INT8 } outer { kind: NESTEROV }",
        "ONE_PEER_EXPONENTIAL");
}

TEST_CASE("exactness: local-step gossip with overlap, H = 4, int8 CHOCO, outer Nesterov (ring)") {
  exact("local_steps: 4 overlap: true compression { kind: INT8 } outer { kind: NESTEROV lr: 0.3 }");
}

TEST_CASE("exactness: DiLoCo, H = 5, AdamW inside, outer Nesterov (4 nodes)") {
  RoundJob job;
  TempDir dir;
  job.rounds = "algorithm: ALLREDUCE local_steps: 5 outer { kind: NESTEROV }";
  // AdamW as the inner optimizer (DiLoCo's): the harness's momentum optimizer replaced.
  std::string text = job.job.config_text();
  const std::string sgd =
      "optimizer { kind: MOMENTUM lr: 0.05 momentum: 0.9 weight_decay: 0.0001 }";
  REQUIRE(text.find(sgd) != std::string::npos);
  const std::string cfg = dir.path + "/adamw.pbtxt";
  std::ofstream(cfg) << text.replace(text.find(sgd), sgd.size(),
                                     "optimizer { kind: ADAMW lr: 0.01 weight_decay: 0.01 }")
                     << job.rounds << "\n";
  const std::string work = dir.path + "/run";
  std::string topo;
  const int rc = launch_retrying_ports(dir.path, "RING", 4, work, &topo, [&](const std::string& t) {
    return launch_command(dir.path, t, cfg, work, dir.path + "/ckpt") + " > " + dir.path +
           "/launch.out 2>&1";
  });
  INFO(read_file(dir.path + "/launch.out"));
  REQUIRE(rc == kExitOk);
  const Run sim = run_shell_capture(
      bin("sim/gossip-sim") + " run --algorithm cpsgd-allreduce --topology " + topo +
      " --nodes 4 --config " + cfg + " --quiet --dump-params " + dir.path + "/sim");
  INFO(sim.out);
  REQUIRE(sim.code == 0);
  for (int i = 0; i < 4; ++i) {
    const std::string name = "/node_" + std::to_string(i) + ".f32";
    CHECK(read_f32(work + "/final" + name) == read_f32(dir.path + "/sim" + name));
    // DiLoCo: every node ends at the same anchor.
    CHECK(read_f32(work + "/final" + name) == read_f32(work + "/final/node_0.f32"));
  }
}

TEST_CASE("exactness: DiLoCo, H = 5, int8 with error feedback, outer Nesterov (4 nodes)") {
  exact("algorithm: ALLREDUCE local_steps: 5 compression { kind: INT8 } outer { kind: NESTEROV }");
}

TEST_CASE("exactness: DiLoCo with overlap, H = 4, bf16, outer SGD (4 nodes)") {
  exact(
      "algorithm: ALLREDUCE local_steps: 4 overlap: true compression { kind: BF16 } "
      "outer { kind: SGD lr: 0.8 }");
}

TEST_CASE("exactness: DiLoCo, H = 1, overlap, no compression (4 nodes)") {
  exact("algorithm: ALLREDUCE local_steps: 1 overlap: true");
}

// A straight run keeps every checkpoint (every 6 iterations, H = 4: most mid-round); the newer
// ones are removed and `launch --resume` continues from iteration 18 (round 4, its third step).
void resume_mid_round(const std::string& rounds) {
  RoundJob job;
  job.job.iterations = 40;
  job.rounds = rounds;
  std::string text = job.text();
  const std::string every = "checkpoint { every: 50 keep: 3 }";
  REQUIRE(text.find(every) != std::string::npos);
  text.replace(text.find(every), every.size(), "checkpoint { every: 6 keep: 10 }");
  check_resume_from_18(text, "RING", 4);
}

TEST_CASE("resume mid-round: local-step gossip with int8 CHOCO and outer Nesterov, bit for bit") {
  resume_mid_round("local_steps: 4 compression { kind: INT8 } outer { kind: NESTEROV }");
}

TEST_CASE("resume mid-round: local-step gossip with overlap and bf16 CHOCO, bit for bit") {
  resume_mid_round("local_steps: 4 overlap: true compression { kind: BF16 }");
}

TEST_CASE("resume mid-round: DiLoCo with int8 error feedback and overlap, bit for bit") {
  resume_mid_round(
      "algorithm: ALLREDUCE local_steps: 4 overlap: true compression { kind: INT8 } outer { kind: "
      "NESTEROV }");
}

TEST_CASE("bytes per round: the metrics count the compressed messages (none > bf16 > int8)") {
  std::vector<double> bytes;
  for (const char* kind : {"NONE", "BF16", "INT8"}) {
    CAPTURE(kind);
    TempDir dir;
    RoundJob job;
    job.job.iterations = 40;
    job.rounds = std::string("local_steps: 10 compression { kind: ") + kind + " }";
    const std::string work = launch_and_simulate(dir, job, "RING", 4);
    // Sum of every iteration line's bytes_sent at node 0: 4 rounds to 2 neighbours.
    std::ifstream in(work + "/node-0/metrics.jsonl");
    double sent = 0;
    for (std::string line; std::getline(in, line);) {
      auto m = parse_flat_json(line);
      if (m.is_ok() && (*m)["type"].text == "iter") sent += (*m)["bytes_sent"].number;
    }
    bytes.push_back(sent);
  }
  MESSAGE("bytes sent by node 0 over 4 rounds: none " << bytes[0] << ", bf16 " << bytes[1]
                                                      << ", int8 " << bytes[2]);
  // The model has 210 parameters: 840 B per message as float32, 420 as bf16, 210 + 4·1 as int8
  // (one 256-float block), plus the frames' headers; 8 messages.
  CHECK(bytes[0] >= 8 * 840);
  CHECK(bytes[1] < bytes[0]);
  CHECK(bytes[2] < bytes[1]);
  CHECK(bytes[1] >= 8 * 420);
  CHECK(bytes[2] >= 8 * 214);
}

TEST_CASE("round settings mismatch: refused at the handshake naming the field") {
  RoundJob a, b;
  a.rounds = "local_steps: 5";
  b.rounds = "local_steps: 6";
  const std::string log = handshake_refusal_log(a.text(), b.text());
  INFO(log);
  CHECK(log.find("local_steps: peer") != std::string::npos);
}

}  // namespace gossip::daemon::harness
