// cgroup_cpu_quota on fake cgroup trees (v2, v1, hybrid, namespaced) and usable_cpus against the
// affinity mask this test runs with.
#include "common/cpus.h"

#include <doctest/doctest.h>
#include <sched.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "tests/support/files.h"

namespace gossip {
namespace {

// A fresh directory standing in for /sys/fs/cgroup.
class FakeCgroupRoot {
 public:
  void write(const std::string& relative, const std::string& text) const {
    const std::filesystem::path p = std::filesystem::path(root_.path) / relative;
    std::filesystem::create_directories(p.parent_path());
    std::ofstream(p) << text;
  }
  std::string path() const { return root_.path; }

 private:
  gossip::testing::TempDir root_;
};

TEST_CASE("cgroup v2: the smallest cpu.max on the path to the root") {
  FakeCgroupRoot fs;
  fs.write("cpu.max", "max 100000\n");  // the root: no quota
  fs.write("kubepods/cpu.max", "400000 100000\n");
  fs.write("kubepods/pod1/cpu.max", "150000 100000\n");
  fs.write("kubepods/pod1/ctr/cpu.max", "max 100000\n");
  const auto q = cgroup_cpu_quota("0::/kubepods/pod1/ctr\n", fs.path());
  REQUIRE(q.has_value());
  CHECK(*q == doctest::Approx(1.5));
  // The parent's quota applies where the child sets none; a smaller child quota wins.
  fs.write("kubepods/pod1/ctr/cpu.max", "50000 100000\n");
  CHECK(*cgroup_cpu_quota("0::/kubepods/pod1/ctr\n", fs.path()) == doctest::Approx(0.5));
  // No quota anywhere on the path.
  CHECK_FALSE(cgroup_cpu_quota("0::/\n", fs.path()).has_value());
  CHECK_FALSE(cgroup_cpu_quota("0::/elsewhere/deep\n", fs.path()).has_value());
}

TEST_CASE("cgroup v2 in a namespace: the process's cgroup is the root of what it sees") {
  FakeCgroupRoot fs;
  fs.write("cpu.max", "200000 100000\n");
  const auto q = cgroup_cpu_quota("0::/\n", fs.path());
  REQUIRE(q.has_value());
  CHECK(*q == doctest::Approx(2.0));
  // A path the namespace hides (not mounted here) still finds the quota at the visible root.
  CHECK(*cgroup_cpu_quota("0::/system.slice/docker-1.scope\n", fs.path()) == doctest::Approx(2.0));
}

TEST_CASE("cgroup v1: cfs quota and period of the cpu controller, wherever it is mounted") {
  FakeCgroupRoot fs;
  fs.write("cpu,cpuacct/cpu.cfs_quota_us", "-1\n");
  fs.write("cpu,cpuacct/cpu.cfs_period_us", "100000\n");
  fs.write("cpu,cpuacct/docker/abc/cpu.cfs_quota_us", "300000\n");
  fs.write("cpu,cpuacct/docker/abc/cpu.cfs_period_us", "100000\n");
  const std::string cgroup =
      "12:memory:/docker/abc\n4:cpu,cpuacct:/docker/abc\n1:name=systemd:/docker/abc\n0::/\n";
  const auto q = cgroup_cpu_quota(cgroup, fs.path());
  REQUIRE(q.has_value());
  CHECK(*q == doctest::Approx(3.0));
  // The memory controller's line and an unlimited root change nothing; -1 means no quota.
  fs.write("cpu,cpuacct/docker/abc/cpu.cfs_quota_us", "-1\n");
  CHECK_FALSE(cgroup_cpu_quota(cgroup, fs.path()).has_value());
  // "cpuacct" alone is not the cpu controller.
  fs.write("cpuacct/x/cpu.cfs_quota_us", "100000\n");
  fs.write("cpuacct/x/cpu.cfs_period_us", "100000\n");
  CHECK_FALSE(cgroup_cpu_quota("3:cpuacct:/x\n", fs.path()).has_value());
}

TEST_CASE("malformed or partial files are skipped, not trusted") {
  FakeCgroupRoot fs;
  fs.write("a/cpu.max", "lots\n");
  fs.write("a/b/cpu.max", "100000\n");  // no period
  fs.write("a/b/c/cpu.max", "0 100000\n");
  fs.write("cpu/d/cpu.cfs_quota_us", "200000\n");  // no period file
  CHECK_FALSE(cgroup_cpu_quota("0::/a/b/c\n", fs.path()).has_value());
  CHECK_FALSE(cgroup_cpu_quota("5:cpu:/d\n", fs.path()).has_value());
  CHECK_FALSE(cgroup_cpu_quota("garbage without colons\n\n", fs.path()).has_value());
}

TEST_CASE("usable_cpus is within [1, the affinity mask]") {
  cpu_set_t set;
  CPU_ZERO(&set);
  REQUIRE(sched_getaffinity(0, sizeof set, &set) == 0);
  const int cpus = usable_cpus();
  CHECK(cpus >= 1);
  CHECK(cpus <= CPU_COUNT(&set));
}

}  // namespace
}  // namespace gossip
