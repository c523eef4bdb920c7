#include "tests/support/ports.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <fstream>
#include <utility>
#include <vector>

namespace gossip {

bool loopback_port_free(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return false;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<std::uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  const bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
  ::close(fd);
  return ok;
}

namespace {

// The kernel's range for the local end of outgoing connections (net.ipv4.ip_local_port_range).
// Any connect() on the machine may take one of those ports between our probe and the server's
// bind, so the ports handed out here avoid it.
std::pair<int, int> ephemeral_range() {
  int lo = 32768, hi = 60999;
  std::ifstream in("/proc/sys/net/ipv4/ip_local_port_range");
  int a = 0, b = 0;
  if (in >> a >> b && 0 < a && a <= b) lo = a, hi = b;
  return {lo, hi};
}

}  // namespace

int free_loopback_ports(int n, int from) {
  // The pool: [20000, 60000) without the ephemeral range, as up to two intervals.
  constexpr int kFirst = 20000, kLast = 60000;
  const auto [lo, hi] = ephemeral_range();
  std::vector<std::pair<int, int>> pool;
  if (lo > kFirst) pool.push_back({kFirst, std::min(lo, kLast)});
  if (hi + 1 < kLast) pool.push_back({std::max(hi + 1, kFirst), kLast});
  std::erase_if(pool, [n](const std::pair<int, int>& r) { return r.second - r.first < n; });
  if (pool.empty()) pool.push_back({kFirst, kLast});  // the whole window is ephemeral
  int size = 0;
  for (const auto& [a, b] : pool) size += b - a - n + 1;  // bases with room for n ports
  // `from` picks the starting point (callers spread it by pid); consecutive tries step past.
  long k = ((static_cast<long>(from) - kFirst) % size + size) % size;
  for (int tries = 0; tries < 200; ++tries, k = (k + n + 3) % size) {
    long rest = k;
    int base = 0;
    for (const auto& [a, b] : pool) {
      if (rest < b - a - n + 1) {
        base = a + static_cast<int>(rest);
        break;
      }
      rest -= b - a - n + 1;
    }
    bool ok = true;
    for (int i = 0; i < n && ok; ++i) ok = loopback_port_free(base + i);
    if (ok) return base;
  }
  return 0;
}

}  // namespace gossip
