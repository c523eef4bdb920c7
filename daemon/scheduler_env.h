// `gossipd run --from-env`: a node's id, the node count and every node's address taken from the
// scheduler that started it, and the topology generated from the training config's `topology`
// block on those addresses (docs/daemon.md, "Starting from a scheduler").
//
// Slurm (srun): id SLURM_PROCID, count SLURM_NTASKS, hosts SLURM_JOB_NODELIST and tasks per host
// SLURM_TASKS_PER_NODE (a job step's SLURM_STEP_* values first when srun set them). Tasks are
// placed in blocks, as srun's default distribution does: the first host's tasks are nodes
// 0..c_0-1, and a node's port is base_port + SLURM_LOCALID — the placement `gossip-topo generate
// --hosts h0:c0,h1:c1,...` uses, so the generated file is the one gossip-topo writes.
//
// Kubernetes (a StatefulSet with a headless Service): id the ordinal at the end of the pod's host
// name (`gossip-3` is node 3), count GOSSIP_NODES, node j at
// `<set>-j.<GOSSIP_SERVICE>.<POD_NAMESPACE>.svc.<GOSSIP_CLUSTER_DOMAIN or cluster.local>`, port
// base_port, one node per pod.
//
// Everything the process reads (variables, its host name) comes in through SchedulerEnv, so the
// tests give it fake environments. Errors are InvalidArgument naming the variable (gossipd exits
// 2 on them).
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "common/status.h"
#include "config/train_config.h"
#include "topology/placement.h"
#include "topology/topology.h"

namespace gossip::daemon {

// What the process can see of its scheduler.
struct SchedulerEnv {
  // The value of an environment variable, or nullopt when it is not set.
  std::function<std::optional<std::string>(const std::string&)> var;
  std::string hostname;  // gethostname(): a StatefulSet pod's name
  // The real process environment (getenv, gethostname).
  static SchedulerEnv system();
};

// Where the scheduler put this node and its peers.
struct SchedulerStart {
  std::string scheduler;  // "slurm" or "kubernetes"
  int node_id = 0;
  int num_nodes = 0;
  std::vector<topology::HostSlots> hosts;  // node k on slot k (placement.h), base_port unset
  std::string describe;                    // one log line: which variables said what
};

// A StatefulSet pod's name: the set's name and the pod's ordinal (`web-12` -> {"web", 12}).
struct PodOrdinal {
  std::string set_name;
  int ordinal = 0;
};
// InvalidArgument unless `hostname` (its first label, when it carries a domain) ends in '-' and a
// decimal ordinal without leading zeros, after a non-empty name.
Result<PodOrdinal> parse_pod_ordinal(std::string_view hostname);

// Slurm's start: needs SLURM_PROCID, SLURM_NTASKS, SLURM_JOB_NODELIST and SLURM_LOCALID (and
// SLURM_TASKS_PER_NODE when the list has more than one host). InvalidArgument for a missing or
// malformed variable, an id or local id out of range, tasks per node that do not add up to the
// task count or do not match the host count, and a task that is not where block placement puts it
// (`srun -m cyclic`; also SLURMD_NODENAME, when set, must be the host the list gives it).
Result<SchedulerStart> slurm_start(const SchedulerEnv& env);

// A StatefulSet's start: the pod's host name, GOSSIP_NODES, GOSSIP_SERVICE and POD_NAMESPACE.
Result<SchedulerStart> statefulset_start(const SchedulerEnv& env);

// Slurm when SLURM_PROCID is set, else a StatefulSet when GOSSIP_SERVICE is set, else
// InvalidArgument saying what either needs.
Result<SchedulerStart> scheduler_start(const SchedulerEnv& env);

// The topology `gossip-topo generate <generator> --hosts <hosts> --base-port <base_port>` writes,
// for start.num_nodes nodes, parsed back from that text as gossipd reads any topology file (so its
// fingerprint is the file's). `config_name` names the training config in errors
// ("train.pbtxt: topology.generator: ...").
Result<topology::Topology> generated_topology(const config::pb::TopologyGenerator& generator,
                                              const SchedulerStart& start,
                                              const std::string& config_name);

}  // namespace gossip::daemon
