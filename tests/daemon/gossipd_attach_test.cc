// gossipd's attach mode (docs/attach.md) as real processes: gossipd launch --attach-dir with one
// external trainer per node (attach_trainer, gossipd's own SGD step driven through the C++
// client), over loopback TCP between the daemons and Unix sockets + memfd to the trainers.
#include <signal.h>

#include <chrono>
#include <thread>

#include "tests/daemon/gossipd_harness.h"

namespace gossip::daemon::harness {
namespace {

struct AttachRun {
  TempDir dir;
  Job job;
  std::string cfg, topo, work;
  int rc = -1;
  std::string out;

  explicit AttachRun(int iterations = 40, int deadline_ms = 20000) {
    job.iterations = iterations;
    job.deadline_ms = deadline_ms;
    cfg = dir.path + "/train.pbtxt";
    std::ofstream(cfg) << job.config_text();
    work = dir.path + "/run";
  }
  std::string trainer(const std::string& extra = "") const {
    return bin("tests/daemon/attach_trainer") + " --config " + cfg +
           " --node $GOSSIP_NODE_ID --nodes $GOSSIP_NUM_NODES --out " + dir.path +
           "/trainer_$GOSSIP_NODE_ID.f32" + extra;
  }
  // gossipd launch of a ring of 4 (attach mode unless `trainer_cmd` is empty).
  std::string launch_command(const std::string& trainer_cmd, const std::string& extra = "") {
    topo = write_topology(dir.path, "RING", 4);
    std::string attach =
        trainer_cmd.empty() ? std::string()
                            : " --attach-dir " + dir.path + "/sock --trainer '" + trainer_cmd + "'";
    // exec: the spawned pid is timeout's, which passes a SIGTERM on to the launch and exits after
    // it, so a test that stops the launch early waits for all of it (no process outlives it).
    return "cd " + dir.path + " && exec timeout 150 " + bin("daemon/gossipd") + " launch " + topo +
           " --insecure --config " + cfg + " --workdir " + work +
           " --set checkpoint.dir=" + dir.path + "/ckpt" + attach + " " + extra + " > " + dir.path +
           "/launch.out 2>&1";
  }
  void launch(const std::string& trainer_cmd, const std::string& extra = "") {
    rc = run_shell(launch_command(trainer_cmd, extra));
    out = read_file(dir.path + "/launch.out");
  }
  std::string log(int node, const std::string& file = "log.txt") const {
    return read_file(work + "/node-" + std::to_string(node) + "/" + file);
  }
};

// Launches `run` under CARRY_ON with node 2's trainer killed at iteration 15 by `fault` (an
// attach_trainer flag taking the iteration) and checks that its daemon left (exit 7) with a
// checkpoint at 15 while the other three finished their 40 iterations.
void launch_with_node_2_killed_at_15(AttachRun& run, const std::string& fault) {
  run.launch(run.trainer(" $( [ $GOSSIP_NODE_ID = 2 ] && echo " + fault + " 15 )"),
             "--set fault.policy=CARRY_ON");
  INFO(run.out);
  CHECK(run.rc == kExitTrainerGone);
  CHECK(fs::exists(run.dir.path + "/ckpt/node-2/" + "ckpt-000000000015.bin"));
  for (int i : {0, 1, 3}) {
    CHECK_MESSAGE(run.log(i).find("finished 40 iterations") != std::string::npos, "node " << i);
  }
}

}  // namespace

TEST_CASE(
    "attach exactness: trainers running gossipd's step through the attach socket get gossipd's own "
    "parameters, bit for bit, in an update session and in a plain one") {
  AttachRun own;
  own.launch("");
  INFO(own.out);
  REQUIRE(own.rc == kExitOk);
  // Update session: the daemon mixes in place in the shared buffer and subtracts the trainer's
  // gamma u_t. Plain session: the daemon mixes x_t where it was posted, the trainer applies u_t.
  for (const bool plain : {false, true}) {
    CAPTURE(plain);
    AttachRun attached;
    attached.launch(attached.trainer(plain ? " --plain" : ""));
    INFO(attached.out);
    REQUIRE(attached.rc == kExitOk);
    for (int i = 0; i < 4; ++i) {
      const std::vector<float> mine =
          read_f32(own.work + "/final/node_" + std::to_string(i) + ".f32");
      const std::vector<float> theirs =
          read_f32(attached.dir.path + "/trainer_" + std::to_string(i) + ".f32");
      REQUIRE(!mine.empty());
      CHECK_MESSAGE(mine == theirs, "node " << i);
      // In an update session the daemon's final parameters are the trainer's (written before
      // the last MIXED, which the trainer must not precede by touching the buffer). In a plain
      // one the trainer applies its last u_t after the daemon wrote them.
      if (!plain) {
        CHECK(read_f32(attached.work + "/final/node_" + std::to_string(i) + ".f32") == theirs);
      }
    }
    const std::string log0 = attached.log(0);
    CHECK(log0.find("trainer attached: 210 float32 parameters") != std::string::npos);
    CHECK((log0.find("(update session)") != std::string::npos) == !plain);
  }
  // Not vacuous: the parameters moved and differ between nodes.
  CHECK(read_f32(own.work + "/final/node_0.f32") != read_f32(own.work + "/final/node_1.f32"));
}

TEST_CASE(
    "attach: a trainer that dies makes its daemon leave the group (exit 7, checkpoint of the mixed "
    "state), and the others carry on to the end") {
  AttachRun run(40, 3000);
  launch_with_node_2_killed_at_15(run, "--die-at");
  INFO(run.out);
  CHECK(run.log(2).find("the trainer disconnected (EOF) while the daemon waited for POST(15)") !=
        std::string::npos);
  for (int i : {0, 1, 3})
    CHECK(fs::exists(run.dir.path + "/trainer_" + std::to_string(i) + ".f32"));
}

TEST_CASE(
    "attach: a trainer that dies between its POST and its UPDATE makes its daemon leave with the "
    "checkpoint of x_t it posted, and the others carry on") {
  AttachRun run(40, 3000);
  launch_with_node_2_killed_at_15(run, "--die-after-post");
  INFO(run.out);
  CHECK(run.log(2).find("while the daemon waited for UPDATE(15)") != std::string::npos);
  // x_15 is what the trainer posted (the daemon had sent it; the trainer never writes it in an
  // update session): the checkpoint is at 15, not 16.
  CHECK_FALSE(fs::exists(run.dir.path + "/ckpt/node-2/" + "ckpt-000000000016.bin"));
}

TEST_CASE(
    "attach: a trainer announcing another parameter count is refused with both counts named") {
  AttachRun run;
  run.launch(run.trainer(" $( [ $GOSSIP_NODE_ID = 1 ] && echo --announce 211 )"),
             "--set fault.policy=FAIL_STOP --set timeouts.connect_ms=5000");
  INFO(run.out);
  CHECK(run.rc == kExitUsage);
  const std::string log1 = run.log(1);
  INFO(log1);
  CHECK(log1.find("trainer attached: 211 float32 parameters") != std::string::npos);
  CHECK(log1.find("210 parameters, ours 211") != std::string::npos);
  // The trainer is told why, and ends (it is not left waiting).
  const std::string trainer1 = run.log(1, "trainer.log");
  CHECK(trainer1.find("another configuration") != std::string::npos);
  CHECK(run.out.find("still running after its daemon ended") == std::string::npos);
}

TEST_CASE(
    "attach launch: trainers that all die at start stop their nodes at once, each named with its "
    "own exit status, not gossipd's exit-code table") {
  AttachRun run;
  const auto begin = std::chrono::steady_clock::now();
  // connect_ms 60 s: a launcher that waited for the nodes' own timeout would take a minute.
  run.launch("exit 6", "--set timeouts.connect_ms=60000");
  const double took =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count();
  INFO(run.out);
  MESSAGE("every trainer dead at start: the launch ended after " << took << " s");
  CHECK(took < 30);
  CHECK(run.rc == kExitTrainerGone);
  for (int i = 0; i < 4; ++i) {
    CAPTURE(i);
    CHECK(run.out.find("trainer of node " + std::to_string(i) + " exited: exit 6 (output in ") !=
          std::string::npos);
    CHECK(run.out.find("node " + std::to_string(i) +
                       ": its trainer exited (exit 6) before attaching; stopped by the launcher") !=
          std::string::npos);
  }
  CHECK(run.out.find("no usable checkpoint to resume") == std::string::npos);
  CHECK(run.out.find("; first failure: node ") != std::string::npos);
  const std::string summary = read_file(run.work + "/summary.json");
  CHECK(summary.find("{\"node\":0,\"exit_code\":7,") != std::string::npos);
  CHECK(summary.find("\"cause\":\"its trainer exited (exit 6) before attaching") !=
        std::string::npos);
}

TEST_CASE(
    "attach launch: a trainer killed by a signal is named so, and one that dies mid-run leaves its "
    "node to leave the group by itself (exit 7, not stopped)") {
  AttachRun run(40, 3000);
  launch_with_node_2_killed_at_15(run, "--die-at");
  INFO(run.out);
  // The trainer runs under /bin/sh -c, which reports a command killed by signal 9 as exit 137.
  CHECK(run.out.find("trainer of node 2 exited: exit 137, as a shell reports a command killed by "
                     "signal 9 (Killed)") != std::string::npos);
  CHECK(run.out.find("stopped by the launcher") == std::string::npos);
}

// The launcher's exit line of `run`, a job a configuration mismatch ended (exit 2): the first
// failure, a neighbour that runs another configuration; summary.json names the first failure too.
std::string mismatch_exit_line(const AttachRun& run) {
  CHECK(run.rc == kExitUsage);
  const std::size_t at = run.out.find("exit code 2 (usage/config error); first failure: node ");
  REQUIRE(at != std::string::npos);
  const std::string line = run.out.substr(at, run.out.find('\n', at) - at);
  CHECK(line.find("a neighbour runs another configuration") != std::string::npos);
  CHECK(read_file(run.work + "/summary.json").find("\"first_failure\":\"node ") !=
        std::string::npos);
  return line;
}

TEST_CASE(
    "attach launch: the exit line and summary.json name the first failure's cause (a trainer "
    "with another model size)") {
  AttachRun run;
  run.launch(run.trainer(" $( [ $GOSSIP_NODE_ID = 1 ] && echo --announce 211 )"),
             "--set fault.policy=FAIL_STOP --set timeouts.connect_ms=5000");
  INFO(run.out);
  const std::string line = mismatch_exit_line(run);
  CHECK(line.find(" parameters, ours 21") != std::string::npos);
  CHECK(read_file(run.work + "/summary.json").find("parameters, ours 21") != std::string::npos);
}

TEST_CASE(
    "attach launch: a trainer with another model size ends the whole job within seconds, 5 times "
    "of 5, the cause with both sizes on the exit line, even when a node attaches late") {
  // Node 2's trainer builds an MLP with 20 hidden units (262 parameters) where the others build 16
  // (210): nodes 1, 2 and 3 refuse each other at the handshake and exit 2. Node 0's trainer
  // attaches after they ended, so node 0 never meets the mismatch: it would wait for neighbours
  // that are gone for timeouts.connect_ms (120 s) unless the launcher stops the job.
  for (int attempt = 0; attempt < 5; ++attempt) {
    CAPTURE(attempt);
    AttachRun run;
    const std::string late = "sleep $( [ $GOSSIP_NODE_ID = 0 ] && echo " +
                             std::to_string(1 + attempt) + " || echo 0 ); ";
    const auto begin = std::chrono::steady_clock::now();
    run.launch(
        late + "exec " + run.trainer(" $( [ $GOSSIP_NODE_ID = 2 ] && echo --set model.hidden=20 )"),
        "--set timeouts.connect_ms=120000");
    const double took =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count();
    INFO(run.out);
    MESSAGE("attempt " << attempt << ": the mismatched job ended after " << took << " s");
    CHECK(took < 15);
    const std::string line = mismatch_exit_line(run);
    const bool sizes = line.find("262 parameters, ours 210") != std::string::npos ||
                       line.find("210 parameters, ours 262") != std::string::npos;
    CHECK(sizes);
    // Whichever of nodes 1, 2, 3 failed first, the line names node 2, the odd one.
    CHECK(line.find("node 2") != std::string::npos);
    CHECK(run.out.find("node 0: stopped by the launcher: node ") != std::string::npos);
    CHECK(read_file(run.work + "/summary.json").find("{\"node\":0,\"exit_code\":4,") !=
          std::string::npos);
  }
}

TEST_CASE(
    "attach: a second gossipd on the same --attach path is refused, and neither its probe nor "
    "nc -U nor garbage takes the first one's trainer slot") {
  TempDir dir;
  Job job;
  const std::string cfg = dir.path + "/train.pbtxt";
  std::ofstream(cfg) << job.config_text();
  const std::string topo = dir.path + "/one.pbtxt";
  std::ofstream(topo) << "node { id: 0 address: \"127.0.0.1:" << free_base_port(1) << "\" }\n";
  const std::string sock = dir.path + "/n0.sock";
  const std::string run = bin("daemon/gossipd") + " run " + topo + " --node 0 --config " + cfg +
                          " --insecure --attach " + sock;
  const pid_t first = spawn_shell("cd " + dir.path + " && exec " + run +
                                  " --set checkpoint.dir=ck1 > first.log 2>&1");
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (read_file(dir.path + "/first.log").find("waiting up to") == std::string::npos &&
         std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  // The second daemon: refused, naming the path.
  const Run second =
      run_shell_capture("cd " + dir.path + " && " + run + " --set checkpoint.dir=ck2");
  CHECK(second.code == kExitUsage);
  CHECK(second.out.find("attach socket " + sock + " is in use") != std::string::npos);
  // nc -U that closes, and one that sends garbage.
  CHECK(run_shell("/usr/bin/python3 -c \"import socket; s=socket.socket(socket.AF_UNIX); "
                  "s.connect('" +
                  sock +
                  "'); s.close(); s=socket.socket(socket.AF_UNIX); "
                  "s.connect('" +
                  sock +
                  "'); s.sendall(b'GET / HTTP/1.1\\r\\n\\r\\n'); "
                  "s.recv(100); s.close()\"") == 0);
  // The trainer still attaches, and the first daemon trains to the end.
  const Run trainer = run_shell_capture(bin("tests/daemon/attach_trainer") + " --config " + cfg +
                                        " --node 0 --nodes 1 --socket " + sock);
  CHECK(trainer.code == 0);
  const int first_rc = wait_exit(first);
  const std::string log = read_file(dir.path + "/first.log");
  INFO(log);
  CHECK(first_rc == kExitOk);
  CHECK(log.find("a connection closed before saying HELLO") != std::string::npos);
  CHECK(log.find("dropped a connection that sent a message without the attach magic") !=
        std::string::npos);
  CHECK(log.find("finished " + std::to_string(job.iterations) + " iterations") !=
        std::string::npos);
}

TEST_CASE("attach: when the daemon dies the trainer's next call fails at once with the reason") {
  AttachRun run(100000, 3000);
  const pid_t launcher =
      spawn_shell(run.launch_command(run.trainer(), "--set fault.policy=CARRY_ON"));
  // Wait until node 0 trains, then kill its daemon.
  const std::string pid_file = run.work + "/node-0/pid";
  eventually([&] { return run.log(0).find("trainer attached") != std::string::npos; }, 60000, 100);
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  const pid_t daemon0 = std::stoi(read_file(pid_file));
  REQUIRE(::kill(daemon0, SIGKILL) == 0);
  // The trainer of node 0 ends on its own within seconds, naming what happened.
  std::string trainer0;
  eventually(
      [&] {
        trainer0 = run.log(0, "trainer.log");
        return trainer0.find("attach_trainer:") != std::string::npos;
      },
      20000, 100);
  INFO(trainer0);
  CHECK(trainer0.find("Unavailable") != std::string::npos);
  ::kill(launcher, SIGTERM);  // the others are still training: stop them
  wait_exit(launcher);
}

}  // namespace gossip::daemon::harness

namespace gossip::daemon::harness {
namespace {

// Attached trainers with local_steps: 5 (WELCOME carries H; the trainer takes its own 5 steps
// between POSTs, the daemon's iterations count rounds).
void attach_rounds(const std::string& rounds, bool shared_anchor) {
  AttachRun run(8);
  std::ofstream(run.cfg) << run.job.config_text() << rounds << "\n";
  run.launch(run.trainer(" --plain"));
  INFO(run.out);
  REQUIRE(run.rc == kExitOk);
  std::vector<std::vector<float>> finals;
  for (int i = 0; i < 4; ++i) {
    // The daemons' final parameters: the last round's result (the trainer goes on to take H more
    // steps before it sees BYE).
    finals.push_back(read_f32(run.work + "/final/node_" + std::to_string(i) + ".f32"));
    REQUIRE(finals.back().size() == 210);
    CHECK(run.log(i).find("finished 8 iterations") != std::string::npos);
  }
  // 8 rounds of 5 steps moved the models; DiLoCo's nodes share the anchor, gossip's differ.
  CHECK((finals[0] == finals[1]) == shared_anchor);
}

}  // namespace

TEST_CASE("attach with local steps: int8 CHOCO gossip with 5 trainer steps per round") {
  attach_rounds("local_steps: 5 compression { kind: INT8 } outer { kind: NESTEROV }", false);
}

TEST_CASE("attach with local steps: DiLoCo averages the first posts, then 5 steps per round") {
  attach_rounds("algorithm: ALLREDUCE local_steps: 5 compression { kind: INT8 }", true);
}

TEST_CASE("attach with local steps: an update session is refused naming the plain one") {
  AttachRun run(8);
  std::ofstream(run.cfg) << run.job.config_text() << "local_steps: 5\n";
  run.launch(run.trainer(), "--set timeouts.connect_ms=5000");
  INFO(run.out);
  CHECK(run.rc == kExitUsage);
  CHECK(run.out.find("attach in a plain session") != std::string::npos);
}

}  // namespace gossip::daemon::harness
