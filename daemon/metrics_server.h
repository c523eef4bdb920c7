// MetricsServer: the small HTTP/1.1 server behind `gossipd run --metrics-listen ADDR:PORT`
// (docs/daemon.md "Prometheus metrics"). It answers
//   GET /metrics   200, the node's LiveMetrics snapshot in the Prometheus text format 0.0.4
//                  (daemon/prometheus.h), Content-Type: text/plain; version=0.0.4
//   GET /healthz   200 "ok\n" while the process runs (liveness and readiness probes)
// and 404 for other paths, 405 for other methods, 400 for a request it cannot read (at most
// 8 KiB of request line and headers, within 5 s). Every response closes its connection.
//
// After Asio's HTTP server example: the server owns an io_context on a thread of its own, the
// acceptor, and connections that keep themselves alive with shared_from_this; stop() closes the
// acceptor and every connection and joins the thread. The training thread never waits for it:
// it only publishes snapshots into LiveMetrics, which the server's thread copies and formats.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "common/status.h"
#include "daemon/prometheus.h"

namespace gossip::daemon {

struct ListenAddress {
  std::string host;  // an IP literal (IPv6 without brackets) or a host name
  std::uint16_t port = 0;
};

// "HOST:PORT" or "[IPV6]:PORT", PORT in 1..65535. InvalidArgument saying what is wrong.
Result<ListenAddress> parse_listen_address(std::string_view text);

class MetricsServer {
 public:
  // Binds `address` and starts serving `metrics` (shared with the training thread). Errors:
  // InvalidArgument when the host does not resolve to a local address, Unavailable when the port
  // is in use (or cannot be bound), naming the address.
  static Result<std::unique_ptr<MetricsServer>> start(const ListenAddress& address,
                                                      std::shared_ptr<const LiveMetrics> metrics);
  ~MetricsServer();  // stop()

  std::uint16_t port() const;  // the bound port
  // Closes the acceptor and every connection, and joins the server's thread. Idempotent.
  void stop();

  class Impl;

 private:
  explicit MetricsServer(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}
  std::shared_ptr<Impl> impl_;
};

}  // namespace gossip::daemon
