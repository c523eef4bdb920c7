// gossipd's metrics endpoint (daemon/metrics_server.h) over real loopback sockets: what each path
// and method answers, a slow client that does not hold up others, the address parser, and a port
// that is taken.
#include "daemon/metrics_server.h"

#include <doctest/doctest.h>

#include <thread>

#include "tests/daemon/exposition_check.h"
#include "tests/daemon/http_client.h"

namespace gossip::daemon {
namespace {

using gossip::testing::http_get;
using gossip::testing::http_raw;

std::unique_ptr<MetricsServer> serve(const std::shared_ptr<LiveMetrics>& live) {
  Result<std::unique_ptr<MetricsServer>> s = MetricsServer::start({"127.0.0.1", 0}, live);
  REQUIRE(s.is_ok());
  REQUIRE((*s)->port() > 0);
  return std::move(*s);
}

TEST_CASE("GET /metrics serves the latest snapshot, /healthz ok, others 404, 405 or 400") {
  auto live = std::make_shared<LiveMetrics>();
  MetricsSnapshot s;
  s.node = 5;
  s.algorithm = "dpsgd";
  s.iteration = 17;
  s.neighbours = {{4, 100, 200, 0.5, 0, 0, true}};
  live->publish(s);
  std::unique_ptr<MetricsServer> server = serve(live);
  const int port = server->port();

  for (const std::string version : {"1.0", "1.1"}) {
    const testing::HttpResponse r = http_get(port, "/metrics", version);
    REQUIRE(r.status == 200);
    CHECK(r.head.find("Content-Type: text/plain; version=0.0.4") != std::string::npos);
    CHECK(r.head.find("Content-Length: " + std::to_string(r.body.size())) != std::string::npos);
    CHECK(r.body == format_exposition(s));
    CHECK(exposition::parse(r.body).error.empty());
  }
  s.iteration = 18;  // the next publish is what the next scrape sees
  live->publish(s);
  CHECK(*exposition::parse(http_get(port, "/metrics?x=1").body).value("gossip_iteration") == 18);

  const testing::HttpResponse health = http_get(port, "/healthz");
  CHECK(health.status == 200);
  CHECK(health.body == "ok\n");
  CHECK(http_get(port, "/").status == 404);
  CHECK(http_raw(port, "POST /metrics HTTP/1.1\r\nContent-Length: 0\r\n\r\n").status == 405);
  CHECK(http_raw(port, "garbage\r\n\r\n").status == 400);
  CHECK(http_raw(port, "GET /metrics HTTP/1.1\r\n" + std::string(9000, 'x')).status == 400);
}

TEST_CASE("a client that sends nothing does not hold up another, and stop() closes it") {
  auto live = std::make_shared<LiveMetrics>();
  std::unique_ptr<MetricsServer> server = serve(live);
  const int port = server->port();
  testing::HttpResponse silent;
  std::thread slow([&] { silent = http_raw(port, "GET /metr", 30); });  // never completes its head
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  const auto start = std::chrono::steady_clock::now();
  CHECK(http_get(port, "/healthz").status == 200);
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(2));
  server->stop();  // closes the silent connection: the reader returns without a response
  slow.join();
  CHECK(silent.status == 0);
  CHECK(http_get(port, "/healthz", "1.0", 1).status == 0);  // nobody listens any more
}

TEST_CASE("a port in use is Unavailable, naming the address") {
  auto live = std::make_shared<LiveMetrics>();
  std::unique_ptr<MetricsServer> first = serve(live);
  Result<std::unique_ptr<MetricsServer>> second =
      MetricsServer::start({"127.0.0.1", first->port()}, live);
  REQUIRE_FALSE(second.is_ok());
  CHECK(second.status().code() == StatusCode::kUnavailable);
  CHECK(second.status().message().find("127.0.0.1:" + std::to_string(first->port())) !=
        std::string::npos);
  CHECK(second.status().message().find("in use") != std::string::npos);
}

TEST_CASE("listen addresses: HOST:PORT and [IPV6]:PORT, port 1..65535") {
  Result<ListenAddress> a = parse_listen_address("0.0.0.0:9400");
  REQUIRE(a.is_ok());
  CHECK(a->host == "0.0.0.0");
  CHECK(a->port == 9400);
  a = parse_listen_address("[::1]:65535");
  REQUIRE(a.is_ok());
  CHECK(a->host == "::1");
  CHECK(a->port == 65535);
  a = parse_listen_address("node-3.svc:1");
  REQUIRE(a.is_ok());
  CHECK(a->host == "node-3.svc");
  for (const char* bad : {"9400", ":9400", "host:", "host:0", "host:65536", "host:94x", "::1:9400",
                          "[::1]9400", "[]:1", "host:-1"}) {
    CAPTURE(bad);
    Result<ListenAddress> r = parse_listen_address(bad);
    CHECK_FALSE(r.is_ok());
    if (!r.is_ok()) CHECK(r.status().code() == StatusCode::kInvalidArgument);
  }
}

}  // namespace
}  // namespace gossip::daemon
