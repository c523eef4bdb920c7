// MetricsServer (see metrics_server.h). Every Asio call uses its error_code overload, so no
// exception leaves a handler; a connection that errs is closed and forgotten. A connection's
// deadline timer and its socket are closed by whichever finishes first.
#include "daemon/metrics_server.h"

#include <pthread.h>

#include <asio.hpp>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <set>
#include <thread>

#include "common/log.h"

namespace gossip::daemon {
namespace {

using asio::ip::tcp;

constexpr std::size_t kMaxRequestBytes = 8 << 10;
constexpr auto kRequestTimeout = std::chrono::seconds(5);

std::string response(std::string_view status, std::string_view content_type,
                     const std::string& body) {
  return "HTTP/1.1 " + std::string(status) + "\r\nContent-Type: " + std::string(content_type) +
         "\r\nContent-Length: " + std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n" +
         body;
}

}  // namespace

class MetricsServer::Impl : public std::enable_shared_from_this<MetricsServer::Impl> {
 public:
  explicit Impl(std::shared_ptr<const LiveMetrics> metrics) : metrics_(std::move(metrics)) {}

  Status bind(const ListenAddress& a);
  void run() {
    accept();
    thread_ = std::thread([this] {
      // Named, so that its CPU time can be told apart (bench/metrics_overhead.py).
      ::pthread_setname_np(::pthread_self(), "metrics-http");
      io_.run();
    });
  }
  void stop();
  std::uint16_t port() const { return port_; }
  // The response to one request head (request line and headers).
  std::string answer(std::string_view head) const;

 private:
  class Connection;
  void accept();

  std::shared_ptr<const LiveMetrics> metrics_;
  asio::io_context io_{1};
  tcp::acceptor acceptor_{io_};
  std::set<std::shared_ptr<Connection>> connections_;  // io thread only
  std::thread thread_;
  std::uint16_t port_ = 0;
};

class MetricsServer::Impl::Connection : public std::enable_shared_from_this<Connection> {
 public:
  Connection(Impl& server, tcp::socket socket)
      : server_(server), socket_(std::move(socket)), timer_(socket_.get_executor()) {}

  void start() {
    auto self = shared_from_this();
    timer_.expires_after(kRequestTimeout);
    timer_.async_wait([self](const std::error_code& ec) {
      if (!ec) self->close();
    });
    asio::async_read_until(
        socket_, asio::dynamic_buffer(request_, kMaxRequestBytes), "\r\n\r\n",
        [self](const std::error_code& ec, std::size_t n) { self->on_request(ec, n); });
  }
  void close() {
    std::error_code ignored;
    timer_.cancel();
    socket_.shutdown(tcp::socket::shutdown_both, ignored);
    socket_.close(ignored);
    server_.connections_.erase(shared_from_this());
  }

 private:
  void on_request(const std::error_code& ec, std::size_t n) {
    if (ec && ec != asio::error::not_found) return close();  // closed, reset, or timed out
    // not_found: more than kMaxRequestBytes without the end of the headers.
    reply_ = ec ? response("400 Bad Request", "text/plain", "request head too long\n")
                : server_.answer(std::string_view(request_).substr(0, n));
    auto self = shared_from_this();
    asio::async_write(socket_, asio::buffer(reply_),
                      [self](const std::error_code&, std::size_t) { self->close(); });
  }

  Impl& server_;
  tcp::socket socket_;
  asio::steady_timer timer_;
  std::string request_;
  std::string reply_;
};

Status MetricsServer::Impl::bind(const ListenAddress& a) {
  const std::string where = a.host + ":" + std::to_string(a.port);
  std::error_code ec;
  tcp::resolver resolver(io_);
  const auto results = resolver.resolve(
      a.host, std::to_string(a.port), tcp::resolver::passive | tcp::resolver::numeric_service, ec);
  if (ec || results.empty()) {
    return invalid_argument("cannot resolve " + a.host + ": " + ec.message());
  }
  const tcp::endpoint endpoint = results.begin()->endpoint();
  acceptor_.open(endpoint.protocol(), ec);
  if (!ec) acceptor_.set_option(tcp::acceptor::reuse_address(true), ec);
  if (!ec) acceptor_.bind(endpoint, ec);
  if (!ec) acceptor_.listen(asio::socket_base::max_listen_connections, ec);
  if (ec == asio::error::address_in_use) {
    return unavailable("cannot listen on " + where + ": the port is in use");
  }
  if (ec.value() == EADDRNOTAVAIL) {
    return invalid_argument("cannot listen on " + where + ": not an address of this host");
  }
  if (ec) return unavailable("cannot listen on " + where + ": " + ec.message());
  port_ = acceptor_.local_endpoint(ec).port();
  return Status::ok();
}

void MetricsServer::Impl::accept() {
  acceptor_.async_accept([self = shared_from_this()](const std::error_code& ec, tcp::socket s) {
    if (ec == asio::error::operation_aborted || !self->acceptor_.is_open()) return;
    if (!ec) {
      auto c = std::make_shared<Connection>(*self, std::move(s));
      self->connections_.insert(c);
      c->start();
    }
    self->accept();
  });
}

void MetricsServer::Impl::stop() {
  if (!thread_.joinable()) return;
  asio::post(io_, [this] {
    std::error_code ignored;
    acceptor_.close(ignored);
    for (const std::shared_ptr<Connection>& c : std::set(connections_)) c->close();
  });
  thread_.join();  // io_.run() returns once the last handler ran
}

std::string MetricsServer::Impl::answer(std::string_view head) const {
  const std::size_t line_end = head.find("\r\n");
  const std::string_view line = head.substr(0, line_end);
  const std::size_t sp1 = line.find(' ');
  const std::size_t sp2 = sp1 == std::string_view::npos ? sp1 : line.find(' ', sp1 + 1);
  if (sp2 == std::string_view::npos || line.substr(sp2 + 1).rfind("HTTP/1.", 0) != 0) {
    return response("400 Bad Request", "text/plain", "not an HTTP/1.x request line\n");
  }
  const std::string_view method = line.substr(0, sp1);
  std::string_view target = line.substr(sp1 + 1, sp2 - sp1 - 1);
  target = target.substr(0, target.find('?'));
  if (target != "/metrics" && target != "/healthz") {
    return response("404 Not Found", "text/plain", "try /metrics or /healthz\n");
  }
  if (method != "GET") {
    return response("405 Method Not Allowed", "text/plain", "only GET\n");
  }
  if (target == "/healthz") return response("200 OK", "text/plain", "ok\n");
  return response("200 OK", "text/plain; version=0.0.4; charset=utf-8",
                  format_exposition(metrics_->get()));
}

Result<ListenAddress> parse_listen_address(std::string_view text) {
  const std::size_t colon = text.rfind(':');
  if (colon == std::string_view::npos || colon == 0) {
    return invalid_argument("'" + std::string(text) + "': expected HOST:PORT (e.g. 0.0.0.0:9400)");
  }
  ListenAddress a;
  std::string_view host = text.substr(0, colon);
  if (host.front() == '[') {
    if (host.size() < 3 || host.back() != ']') {
      return invalid_argument("'" + std::string(text) + "': expected [IPV6]:PORT");
    }
    host = host.substr(1, host.size() - 2);
  } else if (host.find(':') != std::string_view::npos) {
    return invalid_argument("'" + std::string(text) +
                            "': an IPv6 address goes in brackets, e.g. [::1]:9400");
  }
  a.host = std::string(host);
  const std::string_view port = text.substr(colon + 1);
  unsigned value = 0;
  const auto [end, err] = std::from_chars(port.data(), port.data() + port.size(), value);
  if (port.empty() || err != std::errc() || end != port.data() + port.size() || value == 0 ||
      value > 65535) {
    return invalid_argument("'" + std::string(text) + "': the port must be 1..65535, not '" +
                            std::string(port) + "'");
  }
  a.port = static_cast<std::uint16_t>(value);
  return a;
}

Result<std::unique_ptr<MetricsServer>> MetricsServer::start(
    const ListenAddress& address, std::shared_ptr<const LiveMetrics> metrics) {
  auto impl = std::make_shared<Impl>(std::move(metrics));
  GOSSIP_RETURN_IF_ERROR(impl->bind(address));
  impl->run();
  return std::unique_ptr<MetricsServer>(new MetricsServer(std::move(impl)));
}

MetricsServer::~MetricsServer() { stop(); }

std::uint16_t MetricsServer::port() const { return impl_->port(); }

void MetricsServer::stop() { impl_->stop(); }

}  // namespace gossip::daemon
