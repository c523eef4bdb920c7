// usable_cpus(): the affinity mask capped by the cgroup CPU quota. The kernel enforces every
// ancestor's quota, so the walk takes the smallest along the path; files that are absent (no
// such controller, a cgroup namespace that hides the ancestors) are skipped rather than treated
// as errors, because the answer is only a default thread count.
#include "common/cpus.h"

#include <sched.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <vector>

#include "common/env.h"
#include "common/strings.h"

namespace gossip {
namespace {

std::optional<long long> parse_integer(std::string_view s) {
  s = trim(s);
  long long v = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size()) return std::nullopt;
  return v;
}

std::optional<std::string> read(const std::string& path) {
  auto data = Env::system().read_file(path);
  if (!data.is_ok()) return std::nullopt;
  return std::move(*data);
}

// The quota in CPUs set in one cgroup directory, nullopt for none (or unreadable).
std::optional<double> quota_v2(const std::string& dir) {
  const auto text = read(dir + "/cpu.max");  // "max 100000" or "150000 100000"
  if (!text) return std::nullopt;
  const std::string_view t = trim(*text);
  const std::size_t space = t.find(' ');
  if (space == std::string_view::npos) return std::nullopt;
  const auto quota = parse_integer(t.substr(0, space));  // "max" does not parse: no quota
  const auto period = parse_integer(t.substr(space + 1));
  if (!quota || !period || *quota <= 0 || *period <= 0) return std::nullopt;
  return static_cast<double>(*quota) / static_cast<double>(*period);
}

std::optional<double> quota_v1(const std::string& dir) {
  const auto quota_text = read(dir + "/cpu.cfs_quota_us");  // -1: no quota
  const auto period_text = read(dir + "/cpu.cfs_period_us");
  if (!quota_text || !period_text) return std::nullopt;
  const auto quota = parse_integer(*quota_text);
  const auto period = parse_integer(*period_text);
  if (!quota || !period || *quota <= 0 || *period <= 0) return std::nullopt;
  return static_cast<double>(*quota) / static_cast<double>(*period);
}

// min over `mount` + path and each of its ancestors up to `mount` itself.
template <typename QuotaOf>
std::optional<double> smallest_on_path(const std::string& mount, std::string_view path,
                                       const QuotaOf& quota_of) {
  std::optional<double> best;
  std::string p(trim(path));
  while (!p.empty() && p.back() == '/') p.pop_back();
  for (;;) {
    if (const auto q = quota_of(mount + p)) best = best ? std::min(*best, *q) : *q;
    if (p.empty()) break;
    const std::size_t slash = p.rfind('/');
    p.resize(slash == std::string::npos ? 0 : slash);
  }
  return best;
}

bool lists_cpu_controller(std::string_view controllers) {
  while (!controllers.empty()) {
    const std::size_t comma = controllers.find(',');
    if (controllers.substr(0, comma) == "cpu") return true;
    if (comma == std::string_view::npos) break;
    controllers.remove_prefix(comma + 1);
  }
  return false;
}

}  // namespace

std::optional<double> cgroup_cpu_quota(std::string_view proc_self_cgroup,
                                       const std::string& cgroup_root) {
  std::optional<double> best;
  const auto take = [&](std::optional<double> q) {
    if (q) best = best ? std::min(*best, *q) : *q;
  };
  while (!proc_self_cgroup.empty()) {
    const std::size_t eol = proc_self_cgroup.find('\n');
    const std::string_view line = proc_self_cgroup.substr(0, eol);
    proc_self_cgroup.remove_prefix(eol == std::string_view::npos ? proc_self_cgroup.size()
                                                                 : eol + 1);
    // "hierarchy-id:controllers:path"; the path may itself contain ':'.
    const std::size_t c1 = line.find(':');
    if (c1 == std::string_view::npos) continue;
    const std::size_t c2 = line.find(':', c1 + 1);
    if (c2 == std::string_view::npos) continue;
    const std::string_view id = line.substr(0, c1);
    const std::string_view controllers = line.substr(c1 + 1, c2 - c1 - 1);
    const std::string_view path = line.substr(c2 + 1);
    if (id == "0" && controllers.empty()) {
      // cgroup v2: the unified hierarchy at the root, or under "unified" on hybrid systems.
      for (const char* mount : {"", "/unified"}) {
        take(smallest_on_path(cgroup_root + mount, path, quota_v2));
      }
    } else if (lists_cpu_controller(controllers)) {
      for (const char* mount : {"/cpu", "/cpu,cpuacct", "/cpuacct,cpu"}) {
        take(smallest_on_path(cgroup_root + mount, path, quota_v1));
      }
    }
  }
  return best;
}

int usable_cpus() {
  int cpus = 1;
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0) cpus = std::max(1, CPU_COUNT(&set));
  if (const auto cgroup = read("/proc/self/cgroup")) {
    if (const auto quota = cgroup_cpu_quota(*cgroup, "/sys/fs/cgroup")) {
      cpus = std::min(cpus, std::max(1, static_cast<int>(std::ceil(*quota))));
    }
  }
  return cpus;
}

}  // namespace gossip
