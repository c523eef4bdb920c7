// Reading the scheduler's environment. Every check here exists because the alternative is a node
// that listens or dials somewhere its peers do not expect, which shows up only as a connect
// timeout (timeouts.connect_ms) long after the start; a wrong variable is a usage error at once.
#include "daemon/scheduler_env.h"

#include <unistd.h>

#include <climits>
#include <cstdlib>

#include "daemon/hostlist.h"
#include "topology/generators.h"
#include "topology/topology.pb.h"
#include "topology/topology_file.h"
#include "topology/validate.h"
#include "topology/weights.h"

namespace gossip::daemon {
namespace {

// The first of `names` that is set: its name and value.
std::optional<std::pair<std::string, std::string>> first_set(
    const SchedulerEnv& env, std::initializer_list<const char*> names) {
  for (const char* name : names) {
    if (std::optional<std::string> v = env.var(name)) return std::make_pair(std::string(name), *v);
  }
  return std::nullopt;
}

Status not_set(const std::string& names, const std::string& who) {
  return invalid_argument(names + " is not set (" + who + ")");
}

// An integer variable in [lo, hi]; `range` says what the bounds are in the error.
Result<int> int_value(const std::string& name, const std::string& value, long lo, long hi,
                      const std::string& range) {
  char* end = nullptr;
  errno = 0;
  const long v = std::strtol(value.c_str(), &end, 10);
  if (value.empty() || *end != '\0' || errno != 0 || v < lo || v > hi ||
      !(value[0] >= '0' && value[0] <= '9')) {
    return invalid_argument(name + "=\"" + value + "\": expected an integer in " + range);
  }
  return static_cast<int>(v);
}

Result<int> int_var(const SchedulerEnv& env, std::initializer_list<const char*> names, long lo,
                    long hi, const std::string& range, const std::string& who) {
  auto v = first_set(env, names);
  if (!v) return not_set(*(names.end() - 1), who);  // the job's variable, not the step's
  return int_value(v->first, v->second, lo, hi, range);
}

constexpr const char* kSrun = "gossipd run --from-env under Slurm reads it from srun";

// The hosts and how many tasks each runs, checked against the task count.
Result<std::vector<topology::HostSlots>> slurm_hosts(const SchedulerEnv& env, int num_tasks) {
  auto list = first_set(env, {"SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST"});
  if (!list) return not_set("SLURM_JOB_NODELIST", kSrun);
  GOSSIP_ASSIGN_OR_RETURN(std::vector<std::string> hosts,
                          expand_hostlist(list->second, list->first));
  std::vector<int> tasks;
  auto layout = first_set(env, {"SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE"});
  if (layout) {
    GOSSIP_ASSIGN_OR_RETURN(tasks, expand_tasks_per_node(layout->second, layout->first));
  } else if (hosts.size() == 1) {
    tasks = {num_tasks};
  } else {
    return not_set("SLURM_TASKS_PER_NODE",
                   std::string(kSrun) + "; needed when " + list->first + " names several hosts");
  }
  if (tasks.size() != hosts.size()) {
    return invalid_argument(layout->first + "=\"" + layout->second + "\" lays out " +
                            std::to_string(tasks.size()) + " hosts but " + list->first + "=\"" +
                            list->second + "\" names " + std::to_string(hosts.size()));
  }
  long sum = 0;
  for (int t : tasks) sum += t;
  if (sum != num_tasks) {
    return invalid_argument((layout ? layout->first + "=\"" + layout->second + "\"" : list->first) +
                            " places " + std::to_string(sum) + " tasks, but SLURM_NTASKS is " +
                            std::to_string(num_tasks));
  }
  std::vector<topology::HostSlots> out;
  for (std::size_t h = 0; h < hosts.size(); ++h) out.push_back({hosts[h], tasks[h], 0});
  return out;
}

}  // namespace

SchedulerEnv SchedulerEnv::system() {
  SchedulerEnv env;
  env.var = [](const std::string& name) -> std::optional<std::string> {
    const char* v = std::getenv(name.c_str());
    if (v == nullptr) return std::nullopt;
    return std::string(v);
  };
  char buf[HOST_NAME_MAX + 1] = {};
  if (gethostname(buf, sizeof buf - 1) == 0) env.hostname = buf;
  return env;
}

Result<PodOrdinal> parse_pod_ordinal(std::string_view hostname) {
  const std::string_view name = hostname.substr(0, hostname.find('.'));
  const std::size_t dash = name.rfind('-');
  const std::string_view digits =
      dash == std::string_view::npos ? std::string_view() : name.substr(dash + 1);
  const std::string why = "host name \"" + std::string(hostname) +
                          "\" is not a StatefulSet pod's (<set name>-<ordinal>, e.g. gossip-3)";
  if (dash == std::string_view::npos || dash == 0 || digits.empty() || digits.size() > 9) {
    return invalid_argument(why);
  }
  for (char ch : digits) {
    if (ch < '0' || ch > '9') return invalid_argument(why);
  }
  if (digits.size() > 1 && digits[0] == '0') {
    return invalid_argument(why + ": ordinal " + std::string(digits) + " has a leading zero");
  }
  return PodOrdinal{std::string(name.substr(0, dash)), std::stoi(std::string(digits))};
}

Result<SchedulerStart> slurm_start(const SchedulerEnv& env) {
  SchedulerStart s;
  s.scheduler = "slurm";
  GOSSIP_ASSIGN_OR_RETURN(s.num_nodes, int_var(env, {"SLURM_STEP_NUM_TASKS", "SLURM_NTASKS"}, 1,
                                               1'000'000, "1..1000000", kSrun));
  const std::string ids = "0.." + std::to_string(s.num_nodes - 1) + " (SLURM_NTASKS is " +
                          std::to_string(s.num_nodes) + ")";
  GOSSIP_ASSIGN_OR_RETURN(s.node_id,
                          int_var(env, {"SLURM_PROCID"}, 0, s.num_nodes - 1, ids, kSrun));
  GOSSIP_ASSIGN_OR_RETURN(s.hosts, slurm_hosts(env, s.num_nodes));
  // Block placement: which host node_id is on, and its index there.
  std::size_t host = 0;
  int first = 0;
  while (first + s.hosts[host].slots <= s.node_id) first += s.hosts[host++].slots;
  const int local_count = s.hosts[host].slots;
  GOSSIP_ASSIGN_OR_RETURN(const int local_id,
                          int_var(env, {"SLURM_LOCALID"}, 0, local_count - 1,
                                  "0.." + std::to_string(local_count - 1) + " (the tasks on host " +
                                      s.hosts[host].host + ")",
                                  kSrun));
  const std::optional<std::string> nodename = env.var("SLURMD_NODENAME");
  if (local_id != s.node_id - first || (nodename && *nodename != s.hosts[host].host)) {
    return invalid_argument(
        "SLURM_PROCID=" + std::to_string(s.node_id) + " SLURM_LOCALID=" + std::to_string(local_id) +
        (nodename ? " on " + *nodename : "") + ": block placement puts task " +
        std::to_string(s.node_id) + " on " + s.hosts[host].host + " as its task " +
        std::to_string(s.node_id - first) +
        "; gossipd needs srun's block distribution (srun -m block, the default)");
  }
  s.describe = "Slurm task " + std::to_string(s.node_id) + " of " + std::to_string(s.num_nodes) +
               ", local task " + std::to_string(local_id) + " on " + s.hosts[host].host + " (" +
               std::to_string(s.hosts.size()) + (s.hosts.size() == 1 ? " host)" : " hosts)");
  return s;
}

Result<SchedulerStart> statefulset_start(const SchedulerEnv& env) {
  constexpr const char* kPod = "gossipd run --from-env in a StatefulSet reads it from the pod spec";
  SchedulerStart s;
  s.scheduler = "kubernetes";
  GOSSIP_ASSIGN_OR_RETURN(const PodOrdinal pod, parse_pod_ordinal(env.hostname));
  GOSSIP_ASSIGN_OR_RETURN(s.num_nodes,
                          int_var(env, {"GOSSIP_NODES"}, 1, 1'000'000, "1..1000000", kPod));
  if (pod.ordinal >= s.num_nodes) {
    return invalid_argument("pod " + env.hostname + " has ordinal " + std::to_string(pod.ordinal) +
                            ", outside 0.." + std::to_string(s.num_nodes - 1) +
                            " (GOSSIP_NODES=" + std::to_string(s.num_nodes) +
                            " must equal the StatefulSet's replicas)");
  }
  s.node_id = pod.ordinal;
  const std::optional<std::string> service = env.var("GOSSIP_SERVICE");
  if (!service || service->empty()) return not_set("GOSSIP_SERVICE", kPod);
  const std::optional<std::string> ns = env.var("POD_NAMESPACE");
  if (!ns || ns->empty()) return not_set("POD_NAMESPACE", kPod);
  const std::string domain = env.var("GOSSIP_CLUSTER_DOMAIN").value_or("cluster.local");
  const std::string suffix = "." + *service + "." + *ns + ".svc." + domain;
  for (int j = 0; j < s.num_nodes; ++j) {
    s.hosts.push_back({pod.set_name + "-" + std::to_string(j) + suffix, 1, 0});
  }
  s.describe = "StatefulSet pod " + env.hostname + " of " + std::to_string(s.num_nodes) +
               ", peers <" + pod.set_name + "-j>" + suffix;
  return s;
}

Result<SchedulerStart> scheduler_start(const SchedulerEnv& env) {
  if (env.var("SLURM_PROCID")) return slurm_start(env);
  if (env.var("GOSSIP_SERVICE")) return statefulset_start(env);
  return invalid_argument(
      "--from-env: no scheduler in the environment: under Slurm run gossipd with srun (which sets "
      "SLURM_PROCID, SLURM_NTASKS, SLURM_JOB_NODELIST, SLURM_LOCALID); in a Kubernetes "
      "StatefulSet set GOSSIP_SERVICE, GOSSIP_NODES and POD_NAMESPACE (examples/k8s/)");
}

Result<topology::Topology> generated_topology(const config::pb::TopologyGenerator& generator,
                                              const SchedulerStart& start,
                                              const std::string& config_name) {
  const std::string field = config_name + ": topology.";
  Result<topology::GeneratorKind> kind = topology::parse_generator_kind(generator.generator());
  if (!kind.is_ok()) return kind.status().with_context(field + "generator");
  Result<topology::WeightScheme> scheme = topology::parse_weight_scheme(generator.weights());
  if (!scheme.is_ok()) return scheme.status().with_context(field + "weights");
  const topology::GeneratorSpec spec{.kind = *kind,
                                     .nodes = start.num_nodes,
                                     .rows = static_cast<int>(generator.rows()),
                                     .cols = static_cast<int>(generator.cols()),
                                     .k = static_cast<int>(generator.k()),
                                     .degree = static_cast<int>(generator.degree()),
                                     .p = generator.p(),
                                     .seed = generator.seed()};
  const topology::Placement placement{
      .host = "", .base_port = static_cast<int>(generator.base_port()), .hosts = start.hosts};
  const std::string context = field + "generator " + generator.generator() + " on " +
                              std::to_string(start.num_nodes) + " nodes";
  // What gossip-topo generate does: build and validate, then write the generator's file ...
  Result<topology::Topology> built = topology::Topology::generate(spec, *scheme, placement);
  if (!built.is_ok()) return built.status().with_context(context);
  Status valid = topology::validate(*built);
  if (!valid.is_ok()) return valid.with_context(context);
  const std::string name = generator.name().empty() ? built->name() : generator.name();
  const std::string text =
      topology::to_text(topology::generator_file(name, spec, *scheme, placement));
  // ... which every node reads back as it would read that file.
  Result<topology::Topology> t =
      topology::parse_topology(text, "<generated from " + config_name + ">");
  if (!t.is_ok()) return t.status().with_context(context);
  valid = topology::validate(*t);
  if (!valid.is_ok()) return valid.with_context(context);
  return t;
}

}  // namespace gossip::daemon
