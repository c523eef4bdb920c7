// gossipd run --from-env's reading of the scheduler (daemon/hostlist.h, daemon/scheduler_env.h):
//  - Slurm host lists expand as Slurm itself expands them: closed-form expectations, and, where
//    Slurm's client is installed, `scontrol show hostnames` on the same lists as an independent
//    reference; malformed lists name the variable and the position of the fault;
//  - tasks-per-node layouts, and a task's id, count, local id and block placement from fake srun
//    environments, every inconsistency refused naming the variable;
//  - StatefulSet pod names map to ordinals, and peers to the headless Service's DNS names;
//  - the generated topology is the one gossip-topo's placement gives (addresses in closed form,
//    the fingerprint of the same file written by hand), and the config's topology block is
//    validated.
#include "daemon/scheduler_env.h"

#include <doctest/doctest.h>

#include <map>
#include <string>
#include <vector>

#include "config/train_config.h"
#include "daemon/hostlist.h"
#include "tests/support/files.h"
#include "tests/support/process.h"
#include "topology/topology_file.h"

namespace gossip::daemon {
namespace {

using Hosts = std::vector<std::string>;

Hosts expand(const std::string& text) {
  Result<Hosts> h = expand_hostlist(text);
  REQUIRE_MESSAGE(h.is_ok(), h.status().to_string());
  return *h;
}

std::string expand_error(const std::string& text) {
  Result<Hosts> h = expand_hostlist(text);
  REQUIRE_MESSAGE(!h.is_ok(), text << " expanded");
  CHECK(h.status().code() == StatusCode::kInvalidArgument);
  return h.status().message();
}

SchedulerEnv fake_env(const std::map<std::string, std::string>& vars, std::string hostname = "") {
  SchedulerEnv env;
  env.var = [vars](const std::string& name) -> std::optional<std::string> {
    auto it = vars.find(name);
    if (it == vars.end()) return std::nullopt;
    return it->second;
  };
  env.hostname = std::move(hostname);
  return env;
}

std::string start_error(const std::map<std::string, std::string>& vars,
                        const std::string& hostname = "") {
  Result<SchedulerStart> s = scheduler_start(fake_env(vars, hostname));
  REQUIRE_MESSAGE(!s.is_ok(), "accepted");
  CHECK(s.status().code() == StatusCode::kInvalidArgument);
  return s.status().message();
}

}  // namespace

TEST_CASE("hostlist: ranges, zero padding, several groups, commas inside brackets") {
  CHECK(expand("localhost") == Hosts{"localhost"});
  CHECK(expand("a,b,c") == Hosts{"a", "b", "c"});
  CHECK(expand("node[01-03,07],gpu-a[1-2]") ==
        Hosts{"node01", "node02", "node03", "node07", "gpu-a1", "gpu-a2"});
  CHECK(expand("y[8-10]") == Hosts{"y8", "y9", "y10"});  // width of LO: none
  CHECK(expand("x[098-101]") == Hosts{"x098", "x099", "x100", "x101"});
  CHECK(expand("n[7]") == Hosts{"n7"});
  CHECK(expand("r[1-2]n[1-2]") == Hosts{"r1n1", "r1n2", "r2n1", "r2n2"});  // last varies fastest
  CHECK(expand("n[1-2]-ib,m") == Hosts{"n1-ib", "n2-ib", "m"});
  CHECK(expand("n[0-999]").size() == 1000);
  CHECK(expand("n[0-999]")[999] == "n999");
}

TEST_CASE("hostlist: the same expansion as Slurm's scontrol show hostnames") {
  if (gossip::testing::run_shell("command -v scontrol >/dev/null 2>&1") != 0) {
    MESSAGE("scontrol is not installed (Debian slurm-client): skipping the comparison with Slurm");
    return;
  }
  gossip::testing::TempDir dir;
  // scontrol reads a configuration before it does anything; a minimal one, no daemons needed.
  const std::string conf =
      dir.write("slurm.conf",
                "ClusterName=x\nSlurmctldHost=localhost\nNodeName=a\nPartitionName=p Nodes=a\n");
  for (const std::string list :
       {"node[01-03,07],gpu-a[1-2]", "y[8-10]", "x[098-101]", "r[1-2]n[1-2]", "a,b,c",
        "c[1,3,5-6,010-011]", "vm", "gpu[7],cpu[1-3,5]"}) {
    const auto r = gossip::testing::run_shell_capture(
        "SLURM_CONF=" + conf + " timeout 20 scontrol show hostnames '" + list + "' 2>/dev/null");
    REQUIRE_MESSAGE(r.code == 0, list << ": " << r.out);
    std::string mine;
    for (const std::string& h : expand(list)) mine += h + "\n";
    CHECK_MESSAGE(mine == r.out, list);
  }
}

TEST_CASE("hostlist: malformed lists name the variable, the value and the position") {
  CHECK(expand_error("node[01-x3]") ==
        "SLURM_JOB_NODELIST=\"node[01-x3]\": position 9: expected the end of the range, got 'x'");
  CHECK(expand_error("").find("empty host list") != std::string::npos);
  CHECK(expand_error("node[1-3").find("position 9: '[' is not closed") != std::string::npos);
  CHECK(expand_error("node]1").find("position 5: ']' without '['") != std::string::npos);
  CHECK(expand_error("node[]").find("position 6: expected a number, got ']'") != std::string::npos);
  CHECK(expand_error("n[1-[2]]").find("position 5: expected the end of the range, got '['") !=
        std::string::npos);
  CHECK(expand_error("n[1,]").find("position 5: expected a number") != std::string::npos);
  CHECK(expand_error("a,,b").find("position 3: empty host name") != std::string::npos);
  CHECK(expand_error(",a").find("position 1: empty host name") != std::string::npos);
  CHECK(expand_error("a,").find("position 2: ',' ends the list") != std::string::npos);
  CHECK(expand_error("node[3-1]").find("position 6: range 3-1 runs backwards") !=
        std::string::npos);
  CHECK(expand_error("n[1-9999999]").find("more than 1000000 hosts") != std::string::npos);
  CHECK(expand_error("a[1-1000]b[1-1001]").find("more than 1000000 hosts") != std::string::npos);
  CHECK(expand_error("n[1-1234567890123456789]").find("more than 18 digits") != std::string::npos);
  CHECK(expand_error("a b").find("white space") != std::string::npos);
  // The variable a caller names is the one in the message.
  CHECK(expand_hostlist("x[", "SLURM_STEP_NODELIST")
            .status()
            .message()
            .rfind("SLURM_STEP_NODELIST=\"x[\"", 0) == 0);
}

TEST_CASE("tasks per node: counts and repeats") {
  auto tasks = [](const std::string& t) {
    Result<std::vector<int>> r = expand_tasks_per_node(t);
    REQUIRE_MESSAGE(r.is_ok(), r.status().to_string());
    return *r;
  };
  CHECK(tasks("2(x3),1") == std::vector<int>{2, 2, 2, 1});
  CHECK(tasks("4") == std::vector<int>{4});
  CHECK(tasks("1(x2),3(x1),5") == std::vector<int>{1, 1, 3, 5});
  for (const auto& [bad, where] : std::vector<std::pair<std::string, std::string>>{
           {"", "empty task layout"},
           {"2(x0)", "position 4: repeat count must be >= 1"},
           {"0", "position 1: task count must be in 1..1000000"},
           {"2(3)", "position 3: expected 'x' after '('"},
           {"2(x3", "position 5: expected ')'"},
           {"2,", "position 3: expected a task count after ','"},
           {"a", "position 1: expected a task count, got 'a'"},
           {"2x3", "position 2: expected ',' or '(', got 'x'"},
           {"1(x999999),1(x2)", "more than 1000000 hosts"}}) {
    Result<std::vector<int>> r = expand_tasks_per_node(bad);
    REQUIRE_MESSAGE(!r.is_ok(), bad);
    CHECK_MESSAGE(r.status().message().find(where) != std::string::npos, r.status().message());
    CHECK(r.status().message().rfind("SLURM_TASKS_PER_NODE=\"" + bad + "\"", 0) == 0);
  }
}

TEST_CASE("slurm: id, count and block placement from srun's variables") {
  const std::map<std::string, std::string> base{{"SLURM_NTASKS", "7"},
                                                {"SLURM_JOB_NODELIST", "node[1-3]"},
                                                {"SLURM_TASKS_PER_NODE", "3,2(x2)"}};
  // Tasks 0-2 on node1, 3-4 on node2, 5-6 on node3: local ids 0,1,2,0,1,0,1.
  const int local[] = {0, 1, 2, 0, 1, 0, 1};
  for (int id = 0; id < 7; ++id) {
    auto vars = base;
    vars["SLURM_PROCID"] = std::to_string(id);
    vars["SLURM_LOCALID"] = std::to_string(local[id]);
    Result<SchedulerStart> s = scheduler_start(fake_env(vars));
    REQUIRE_MESSAGE(s.is_ok(), s.status().to_string());
    CHECK(s->scheduler == "slurm");
    CHECK(s->node_id == id);
    CHECK(s->num_nodes == 7);
    REQUIRE(s->hosts.size() == 3);
    CHECK(s->hosts[0].host == "node1");
    CHECK(s->hosts[0].slots == 3);
    CHECK(s->hosts[2].host == "node3");
    CHECK(s->hosts[2].slots == 2);
  }
  // One host: SLURM_TASKS_PER_NODE may be left out.
  Result<SchedulerStart> one = scheduler_start(fake_env({{"SLURM_PROCID", "2"},
                                                         {"SLURM_NTASKS", "4"},
                                                         {"SLURM_JOB_NODELIST", "vm"},
                                                         {"SLURM_LOCALID", "2"},
                                                         {"SLURMD_NODENAME", "vm"}}));
  REQUIRE_MESSAGE(one.is_ok(), one.status().to_string());
  CHECK(one->hosts.size() == 1);
  CHECK(one->hosts[0].slots == 4);
  // A job step's own variables come first (srun -n 2 inside a larger allocation).
  Result<SchedulerStart> step = scheduler_start(fake_env({{"SLURM_PROCID", "1"},
                                                          {"SLURM_NTASKS", "8"},
                                                          {"SLURM_STEP_NUM_TASKS", "2"},
                                                          {"SLURM_JOB_NODELIST", "n[1-4]"},
                                                          {"SLURM_TASKS_PER_NODE", "2(x4)"},
                                                          {"SLURM_STEP_NODELIST", "n2"},
                                                          {"SLURM_STEP_TASKS_PER_NODE", "2"},
                                                          {"SLURM_LOCALID", "1"}}));
  REQUIRE_MESSAGE(step.is_ok(), step.status().to_string());
  CHECK(step->num_nodes == 2);
  CHECK(step->hosts.size() == 1);
  CHECK(step->hosts[0].host == "n2");
}

TEST_CASE("slurm: every inconsistency is refused naming the variable") {
  const std::map<std::string, std::string> ok{{"SLURM_PROCID", "1"},
                                              {"SLURM_NTASKS", "4"},
                                              {"SLURM_JOB_NODELIST", "n[1-2]"},
                                              {"SLURM_TASKS_PER_NODE", "2(x2)"},
                                              {"SLURM_LOCALID", "1"}};
  REQUIRE(scheduler_start(fake_env(ok)).is_ok());
  auto with = [&](const std::string& k, const std::string& v) {
    auto m = ok;
    if (v == "<unset>") {
      m.erase(k);
    } else {
      m[k] = v;
    }
    return start_error(m);
  };
  CHECK(with("SLURM_PROCID", "4").find("SLURM_PROCID=\"4\": expected an integer in 0..3") !=
        std::string::npos);
  CHECK(with("SLURM_PROCID", "-1").find("SLURM_PROCID=\"-1\"") != std::string::npos);
  CHECK(with("SLURM_PROCID", "1x").find("SLURM_PROCID=\"1x\"") != std::string::npos);
  CHECK(with("SLURM_NTASKS", "<unset>").find("SLURM_NTASKS is not set") != std::string::npos);
  CHECK(with("SLURM_LOCALID", "<unset>").find("SLURM_LOCALID is not set") != std::string::npos);
  CHECK(with("SLURM_LOCALID", "2").find("SLURM_LOCALID=\"2\": expected an integer in 0..1") !=
        std::string::npos);
  CHECK(with("SLURM_JOB_NODELIST", "<unset>").find("SLURM_JOB_NODELIST is not set") !=
        std::string::npos);
  CHECK(with("SLURM_JOB_NODELIST", "n[1-2").find("SLURM_JOB_NODELIST=\"n[1-2\": position 6") !=
        std::string::npos);
  CHECK(with("SLURM_TASKS_PER_NODE", "<unset>").find("SLURM_TASKS_PER_NODE is not set") !=
        std::string::npos);
  CHECK(with("SLURM_TASKS_PER_NODE", "2(x3)").find("lays out 3 hosts but") != std::string::npos);
  CHECK(with("SLURM_TASKS_PER_NODE", "3,2").find("places 5 tasks, but SLURM_NTASKS is 4") !=
        std::string::npos);
  // Cyclic distribution: task 1 is the first task of n2, not n1's second.
  CHECK(with("SLURM_LOCALID", "0").find("srun -m block") != std::string::npos);
  auto wrong_host = ok;
  wrong_host["SLURMD_NODENAME"] = "n2";
  CHECK(start_error(wrong_host).find("on n2: block placement puts task 1 on n1") !=
        std::string::npos);
  // Neither scheduler.
  CHECK(start_error({}).find("no scheduler in the environment") != std::string::npos);
}

TEST_CASE("statefulset: the pod's host name gives its ordinal") {
  auto ordinal = [](const std::string& h) {
    Result<PodOrdinal> p = parse_pod_ordinal(h);
    REQUIRE_MESSAGE(p.is_ok(), p.status().to_string());
    return *p;
  };
  CHECK(ordinal("gossip-3").ordinal == 3);
  CHECK(ordinal("gossip-3").set_name == "gossip");
  CHECK(ordinal("my-set-12").set_name == "my-set");
  CHECK(ordinal("my-set-12").ordinal == 12);
  CHECK(ordinal("gossip-0.gossip.ml.svc.cluster.local").ordinal == 0);
  for (const std::string bad :
       {"gossip", "gossip-", "-3", "gossip-03", "gossip-x", "", "g-1a", "g-1234567890"}) {
    CHECK_MESSAGE(!parse_pod_ordinal(bad).is_ok(), bad);
  }
  CHECK(parse_pod_ordinal("gossip-03").status().message().find("leading zero") !=
        std::string::npos);
}

TEST_CASE("statefulset: peers through the headless Service's DNS names") {
  std::map<std::string, std::string> vars{
      {"GOSSIP_SERVICE", "gossip"}, {"GOSSIP_NODES", "4"}, {"POD_NAMESPACE", "ml"}};
  Result<SchedulerStart> s = scheduler_start(fake_env(vars, "gossip-2"));
  REQUIRE_MESSAGE(s.is_ok(), s.status().to_string());
  CHECK(s->scheduler == "kubernetes");
  CHECK(s->node_id == 2);
  CHECK(s->num_nodes == 4);
  REQUIRE(s->hosts.size() == 4);
  for (int j = 0; j < 4; ++j) {
    CHECK(s->hosts[j].host == "gossip-" + std::to_string(j) + ".gossip.ml.svc.cluster.local");
    CHECK(s->hosts[j].slots == 1);
  }
  vars["GOSSIP_CLUSTER_DOMAIN"] = "example.org";
  CHECK(scheduler_start(fake_env(vars, "gossip-0"))->hosts[3].host ==
        "gossip-3.gossip.ml.svc.example.org");
  CHECK(start_error(vars, "gossip-4").find("ordinal 4, outside 0..3 (GOSSIP_NODES=4") !=
        std::string::npos);
  CHECK(start_error(vars, "gossip").find("not a StatefulSet pod's") != std::string::npos);
  vars.erase("POD_NAMESPACE");
  CHECK(start_error(vars, "gossip-1").find("POD_NAMESPACE is not set") != std::string::npos);
  vars["POD_NAMESPACE"] = "ml";
  vars["GOSSIP_NODES"] = "0";
  CHECK(start_error(vars, "gossip-0").find("GOSSIP_NODES=\"0\"") != std::string::npos);
}

TEST_CASE("generated topology: gossip-topo's placement, the hand-written file's fingerprint") {
  SchedulerStart s;
  s.num_nodes = 4;
  s.hosts = {{"n1", 3, 0}, {"n2", 1, 0}};
  config::pb::TopologyGenerator g;
  g.set_generator("one_peer_exponential");
  g.set_base_port(7100);
  g.set_weights("default");
  g.set_k(1);
  Result<topology::Topology> t = generated_topology(g, s, "train.pbtxt");
  REQUIRE_MESSAGE(t.is_ok(), t.status().to_string());
  REQUIRE(t->num_nodes() == 4);
  CHECK(t->name() == "one_peer_exponential4");
  CHECK(t->is_time_varying());
  // Node k on slot k: n1's three nodes on 7100..7102, n2's one on 7100.
  const char* want[] = {"n1:7100", "n1:7101", "n1:7102", "n2:7100"};
  for (int k = 0; k < 4; ++k) CHECK(t->addresses()[k].to_string() == want[k]);
  // The file a user would write for the same job reads to the same fingerprint.
  Result<topology::Topology> file = topology::parse_topology(
      "name: \"one_peer_exponential4\"\n"
      "generator { kind: ONE_PEER_EXPONENTIAL nodes: 4 base_port: 7100 }\n"
      "host { name: \"n1\" slots: 3 }\nhost { name: \"n2\" slots: 1 }\n",
      "hand.pbtxt");
  REQUIRE_MESSAGE(file.is_ok(), file.status().to_string());
  CHECK(file->fingerprint() == t->fingerprint());
  // Another base port is another topology (the handshake tells the two apart).
  g.set_base_port(7200);
  CHECK(generated_topology(g, s, "train.pbtxt")->fingerprint() != t->fingerprint());
  // Errors name the config and the field.
  g.set_generator("rign");
  CHECK(generated_topology(g, s, "train.pbtxt")
            .status()
            .message()
            .rfind("train.pbtxt: topology.generator", 0) == 0);
  g.set_generator("torus");
  g.set_rows(3);
  g.set_cols(3);
  CHECK(!generated_topology(g, s, "train.pbtxt").is_ok());  // 9 nodes asked for, 4 tasks
  g.set_generator("ring");
  g.set_weights("fancy");
  CHECK(generated_topology(g, s, "train.pbtxt")
            .status()
            .message()
            .rfind("train.pbtxt: topology.weights", 0) == 0);
}

TEST_CASE("config: the topology block is validated") {
  auto errors = [](const std::string& text) {
    Result<config::TrainConfig> c = config::parse_train_config(
        "model { kind: LOGISTIC }\ndata { dataset: SYNTHETIC_LOGISTIC }\nbatch_size: 8\n"
        "optimizer { lr: 0.1 }\niterations: 10\n" +
            text,
        "t.pbtxt");
    REQUIRE_MESSAGE(c.is_ok(), c.status().to_string());
    config::fill_defaults(*c);
    return config::validate_train_config(*c, "t.pbtxt", text).to_string();
  };
  CHECK(errors("") == "OK");
  CHECK(errors("topology { generator: \"ring\" base_port: 7100 }") == "OK");
  CHECK(errors("topology { base_port: 7100 }").find("topology.generator: required") !=
        std::string::npos);
  CHECK(errors("topology { generator: \"ring\" }").find("topology.base_port: required") !=
        std::string::npos);
  CHECK(errors("topology { generator: \"ring\" base_port: 70000 }").find("got 70000") !=
        std::string::npos);
  CHECK(errors("topology { generator: \"edge_list\" base_port: 7100 }").find("reads a file") !=
        std::string::npos);
  CHECK(errors("topology { generator: \"erdos_renyi\" base_port: 7100 p: 1.5 }")
            .find("topology.p: must be in [0, 1]") != std::string::npos);
}

}  // namespace gossip::daemon
