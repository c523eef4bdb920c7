// Memory limits from sysconf and the cgroup files; read once per call (cheap, and a limit may
// change while a daemon runs).
#include "common/memory.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>

namespace gossip {
namespace {

// The first token of a small kernel file as a number of bytes; 0 when absent or "max".
std::uint64_t read_limit(const char* path) {
  std::ifstream in(path);
  std::string token;
  if (!(in >> token) || token == "max") return 0;
  try {
    return std::stoull(token);
  } catch (...) {
    return 0;
  }
}

}  // namespace

std::uint64_t usable_memory_bytes() {
  std::uint64_t limit = 0;
  const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGESIZE);
  if (pages > 0 && page > 0)
    limit = static_cast<std::uint64_t>(pages) * static_cast<std::uint64_t>(page);
  for (const char* f :
       {"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"}) {
    const std::uint64_t c = read_limit(f);
    // cgroup v1 reports "no limit" as a huge number; any value above RAM is no limit.
    if (c > 0 && (limit == 0 || c < limit)) limit = c;
  }
  return limit;
}

std::string format_bytes(std::uint64_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024 && u < 6) {
    v /= 1024;
    ++u;
  }
  char buf[32];
  if (u == 0) {
    std::snprintf(buf, sizeof buf, "%llu B", static_cast<unsigned long long>(bytes));
  } else {
    std::snprintf(buf, sizeof buf, "%.3g %s", v, units[u]);
  }
  return buf;
}

Status check_memory(std::uint64_t bytes, std::uint64_t cap_bytes, const std::string& what) {
  if (cap_bytes > 0 && bytes > cap_bytes) {
    return out_of_range(what + " needs " + format_bytes(bytes) +
                        " of memory, more than the cap of " + format_bytes(cap_bytes));
  }
  const std::uint64_t usable = usable_memory_bytes();
  if (usable > 0 && bytes > usable) {
    return out_of_range(what + " needs " + format_bytes(bytes) +
                        " of memory, more than this machine " + "lets the process use (" +
                        format_bytes(usable) + ")");
  }
  return Status::ok();
}

}  // namespace gossip
