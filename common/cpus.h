// How many CPUs this process can keep busy: what "one thread per core" should mean by default.
//
// A container or a systemd slice often grants a process a CPU bandwidth quota (e.g. 2 CPUs' worth
// of time) while its affinity mask still lists every core of the host. Spawning one thread per
// listed core then oversubscribes the quota: OpenMP's waiting threads spin, the quota throttles
// the whole process, and a parallel loop runs slower than on one thread. usable_cpus() takes the
// smaller of the two.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace gossip {

// CPUs in this process's affinity mask (sched_getaffinity), capped by its cgroup CPU quota
// (rounded up), at least 1. Reads /proc/self/cgroup and /sys/fs/cgroup on every call; cheap
// enough for start-up, not for a hot loop. Thread-safe.
int usable_cpus();

// The CPU quota, in CPUs (quota / period, e.g. 1.5), of the cgroup described by
// `proc_self_cgroup` (the text of /proc/self/cgroup) under the cgroup file systems mounted at
// `cgroup_root` (normally /sys/fs/cgroup): the smallest quota on the path from the process's
// cgroup up to the root, which is what the kernel enforces. cgroup v2 reads cpu.max ("max 100000"
// or "150000 100000"); v1 reads cpu.cfs_quota_us and cpu.cfs_period_us (quota −1: none) in the
// hierarchy of the "cpu" controller (mounted as cpu, cpu,cpuacct or cpuacct,cpu). Directories
// and files that are missing or unreadable are skipped, as with a cgroup namespace where the
// process sees its own cgroup as the root. nullopt: no quota anywhere.
std::optional<double> cgroup_cpu_quota(std::string_view proc_self_cgroup,
                                       const std::string& cgroup_root);

}  // namespace gossip
