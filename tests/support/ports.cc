#include "tests/support/ports.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdint>

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

int free_loopback_ports(int n, int from) {
  int base = from < 20000 || from + n > 60000 ? 20000 : from;
  for (int tries = 0; tries < 200; ++tries, base += n + 3) {
    if (base + n > 60000) base = 20000;
    bool ok = true;
    for (int i = 0; i < n && ok; ++i) ok = loopback_port_free(base + i);
    if (ok) return base;
  }
  return 0;
}

}  // namespace gossip
