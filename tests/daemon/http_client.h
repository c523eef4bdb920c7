// A minimal blocking HTTP/1.1 client for tests (loopback servers: gossipd's /metrics, Prometheus's
// API): sends one request and reads until the server closes the connection, with a deadline.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <string>

namespace gossip::testing {

struct HttpResponse {
  int status = 0;    // 0: no response (connection refused, timeout, garbage)
  std::string body;  // after the blank line
  std::string head;  // status line and headers
};

// Sends `request` (raw bytes) to 127.0.0.1:port and reads the whole response (timeout_s each
// read).
inline HttpResponse http_raw(int port, const std::string& request, int timeout_s = 5) {
  HttpResponse r;
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return r;
  timeval tv{timeout_s, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<std::uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  std::string raw;
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
      ::send(fd, request.data(), request.size(), MSG_NOSIGNAL) ==
          static_cast<ssize_t>(request.size())) {
    char buf[65536];
    for (ssize_t n; (n = ::recv(fd, buf, sizeof buf, 0)) > 0;) raw.append(buf, n);
  }
  ::close(fd);
  const std::size_t end = raw.find("\r\n\r\n");
  if (raw.rfind("HTTP/1.", 0) != 0 || end == std::string::npos || raw.size() < 12) return r;
  r.status = std::atoi(raw.substr(9, 3).c_str());
  r.head = raw.substr(0, end);
  r.body = raw.substr(end + 4);
  return r;
}

// GET `path`. HTTP/1.0 by default: a server then sends the body as is (no chunked encoding),
// closing the connection at its end.
inline HttpResponse http_get(int port, const std::string& path, const std::string& version = "1.0",
                             int timeout_s = 5) {
  return http_raw(
      port, "GET " + path + " HTTP/" + version + "\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n",
      timeout_s);
}

}  // namespace gossip::testing
