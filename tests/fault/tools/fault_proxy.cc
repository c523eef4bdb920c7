// gossip-faultproxy: a fault-injecting TCP proxy for the fault-tolerance tests (docs/fault.md),
// in the spirit of the proxy etcd's robustness tests put between members. It listens on one
// address, opens a connection to the target for every client it accepts, and forwards bytes in
// both directions, injecting faults per direction (c2s: client -> target, s2c: target -> client):
//
//   delay MS ± JITTER  every chunk read is held until now + MS + U(-JITTER, +JITTER) ms (never
//                      earlier than the chunk before it, so byte order within a connection is
//                      kept — what TCP over a jittery path delivers);
//   blackhole          bytes are read and thrown away; the connection stays open (a silent link);
//   pause              bytes are no longer read (TCP back-pressure stalls the sender); resumed
//                      bytes are delivered intact;
//   cut                every open connection is reset (RST); with `refuse on`, new ones too.
//
// Faults change at run time through a line-based control socket on loopback (one command per
// line, one reply line each: "ok ..." or "error: ..."):
//
//   delay c2s|s2c|both MS [JITTER_MS]     blackhole c2s|s2c|both on|off
//   pause c2s|s2c|both on|off             cut        refuse on|off
//   reset (every fault off)               stats      quit
//
// `gossip-faultproxy ctl 127.0.0.1:PORT COMMAND...` sends one command and prints the reply. On
// start the proxy prints one line to stdout, "listening HOST:PORT control HOST:PORT", so callers
// may ask for port 0. SIGINT/SIGTERM stop it. One io_context thread owns every socket and all
// fault state, so nothing needs a lock.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <asio.hpp>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <deque>
#include <iostream>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "common/random.h"

namespace gossip::faultproxy {
namespace {

using asio::ip::tcp;
using SteadyClock = std::chrono::steady_clock;

constexpr std::size_t kReadChunkBytes = 16 * 1024;
// Bytes held per direction before the proxy stops reading (back-pressure instead of unbounded
// memory when the delay is long and the sender fast).
constexpr std::size_t kMaxQueuedBytes = std::size_t{64} << 20;

enum Direction { kClientToServer = 0, kServerToClient = 1 };

struct DirectionFaults {
  std::int64_t delay_ms = 0;
  std::int64_t jitter_ms = 0;
  bool blackhole = false;
  bool paused = false;
};

struct Counters {
  std::uint64_t accepted = 0;
  std::uint64_t refused = 0;
  std::uint64_t cut = 0;
  std::uint64_t bytes[2] = {0, 0};    // forwarded
  std::uint64_t dropped[2] = {0, 0};  // thrown away by a blackhole
};

// "host:port" or "[v6]:port" -> endpoint parts; false when malformed.
bool split_host_port(const std::string& text, std::string& host, std::string& port) {
  const auto colon = text.rfind(':');
  if (colon == std::string::npos || colon + 1 >= text.size()) return false;
  host = text.substr(0, colon);
  port = text.substr(colon + 1);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']')
    host = host.substr(1, host.size() - 2);
  return !host.empty() &&
         std::all_of(port.begin(), port.end(), [](char c) { return c >= '0' && c <= '9'; });
}

std::string endpoint_text(const tcp::endpoint& e) {
  const std::string host = e.address().to_string();
  return (e.address().is_v6() ? "[" + host + "]" : host) + ":" + std::to_string(e.port());
}

class Proxy;

// One proxied connection: the accepted client socket, the socket to the target, and one pump per
// direction. Lives as long as a handler holds it.
class Connection : public std::enable_shared_from_this<Connection> {
 public:
  Connection(Proxy& proxy, tcp::socket client);
  void start(const tcp::resolver::results_type& target);
  // Closes both sockets at once; `reset` sends RST instead of FIN.
  void close(bool reset);
  // Re-arms reads that were stopped by `pause` or by a full queue.
  void kick();
  bool closed() const { return closed_; }

 private:
  struct Chunk {
    SteadyClock::time_point release;
    std::string data;
  };
  struct Pump {
    Direction dir;
    tcp::socket* from = nullptr;
    tcp::socket* to = nullptr;
    std::vector<char> buffer = std::vector<char>(kReadChunkBytes);
    std::deque<Chunk> queue;
    std::size_t queued_bytes = 0;
    std::string held;  // read while paused (the read was already posted); sent on resume
    SteadyClock::time_point last_release{};
    bool reading = false;
    bool writing = false;
    bool eof = false;        // the source half-closed; forward the FIN once the queue drains
    bool shut_down = false;  // FIN forwarded
    std::unique_ptr<asio::steady_timer> timer;
  };

  void read(Pump& p);
  void enqueue(Pump& p, std::string data);
  void write_next(Pump& p);
  void maybe_finish();

  Proxy& proxy_;
  tcp::socket client_;
  tcp::socket server_;
  Pump pumps_[2];
  bool connected_ = false;  // the target accepted; pumps may run
  bool closed_ = false;
};

class Proxy {
 public:
  Proxy(asio::io_context& io, const tcp::endpoint& listen, const tcp::endpoint& control,
        tcp::resolver::results_type target, std::uint64_t seed)
      : io_(io),
        acceptor_(io, listen),
        control_(io, control),
        target_(std::move(target)),
        rng_(seed),
        signals_(io, SIGINT, SIGTERM) {
    signals_.async_wait([this](const asio::error_code& ec, int) {
      if (!ec) stop();
    });
  }

  void start() {
    accept();
    accept_control();
    std::cout << "listening " << endpoint_text(acceptor_.local_endpoint()) << " control "
              << endpoint_text(control_.local_endpoint()) << std::endl;
  }

  void stop() {
    asio::error_code ec;
    acceptor_.close(ec);
    control_.close(ec);
    signals_.cancel(ec);
    for (auto& s : control_sockets_) s->close(ec);
    control_sockets_.clear();
    cut_all(/*reset=*/false);
  }

  DirectionFaults& faults(Direction d) { return faults_[d]; }
  Counters& counters() { return counters_; }
  asio::io_context& io() { return io_; }

  // Delay for a chunk read now in direction d: delay + U(-jitter, +jitter), at least 0.
  std::chrono::microseconds draw_delay(Direction d) {
    const DirectionFaults& f = faults_[d];
    double ms = static_cast<double>(f.delay_ms);
    if (f.jitter_ms > 0) ms += rng_.uniform(-1.0, 1.0) * static_cast<double>(f.jitter_ms);
    return std::chrono::microseconds(static_cast<std::int64_t>(std::max(0.0, ms) * 1000.0));
  }

  void forget(const std::shared_ptr<Connection>& c) { connections_.erase(c); }

 private:
  void accept() {
    acceptor_.async_accept([this](const asio::error_code& ec, tcp::socket socket) {
      if (ec) {
        if (ec == asio::error::operation_aborted || !acceptor_.is_open()) return;
        accept();  // e.g. EMFILE: keep serving the connections we have
        return;
      }
      if (refuse_) {
        ++counters_.refused;
        asio::error_code ignore;
        socket.set_option(asio::socket_base::linger(true, 0), ignore);
        socket.close(ignore);
      } else {
        ++counters_.accepted;
        auto c = std::make_shared<Connection>(*this, std::move(socket));
        connections_.insert(c);
        c->start(target_);
      }
      accept();
    });
  }

  void accept_control() {
    control_.async_accept([this](const asio::error_code& ec, tcp::socket socket) {
      if (ec) {
        if (ec == asio::error::operation_aborted || !control_.is_open()) return;
        accept_control();
        return;
      }
      auto s = std::make_shared<tcp::socket>(std::move(socket));
      control_sockets_.push_back(s);
      read_command(s, std::make_shared<asio::streambuf>(4096));
      accept_control();
    });
  }

  void read_command(std::shared_ptr<tcp::socket> s, std::shared_ptr<asio::streambuf> buf) {
    asio::async_read_until(
        *s, *buf, '\n', [this, s, buf](const asio::error_code& ec, std::size_t n) {
          if (ec) {
            drop_control(s);
            return;
          }
          std::string line(asio::buffers_begin(buf->data()), asio::buffers_begin(buf->data()) + n);
          buf->consume(n);
          while (!line.empty() && (line.back() == '\n' || line.back() == '\r')) line.pop_back();
          auto reply = std::make_shared<std::string>(execute(line) + "\n");
          const bool quit = line == "quit";
          asio::async_write(*s, asio::buffer(*reply),
                            [this, s, buf, reply, quit](const asio::error_code& wec, std::size_t) {
                              if (quit) {
                                stop();
                                return;
                              }
                              if (wec) {
                                drop_control(s);
                                return;
                              }
                              read_command(s, buf);
                            });
        });
  }

  void drop_control(const std::shared_ptr<tcp::socket>& s) {
    asio::error_code ignore;
    s->close(ignore);
    control_sockets_.erase(std::remove(control_sockets_.begin(), control_sockets_.end(), s),
                           control_sockets_.end());
  }

  std::size_t cut_all(bool reset) {
    auto all = connections_;  // close() calls forget()
    for (const auto& c : all) c->close(reset);
    connections_.clear();
    return all.size();
  }

  static bool parse_dirs(const std::string& word, std::vector<Direction>& dirs) {
    if (word == "c2s")
      dirs = {kClientToServer};
    else if (word == "s2c")
      dirs = {kServerToClient};
    else if (word == "both")
      dirs = {kClientToServer, kServerToClient};
    else
      return false;
    return true;
  }

  static bool parse_on_off(const std::string& word, bool& on) {
    if (word == "on")
      on = true;
    else if (word == "off")
      on = false;
    else
      return false;
    return true;
  }

  static bool parse_ms(const std::string& word, std::int64_t& ms) {
    if (word.empty() || word.size() > 9 ||
        !std::all_of(word.begin(), word.end(), [](char c) { return c >= '0' && c <= '9'; }))
      return false;
    ms = std::stoll(word);
    return true;
  }

  std::string execute(const std::string& line) {
    std::istringstream in(line);
    std::vector<std::string> w;
    for (std::string s; in >> s;) w.push_back(s);
    if (w.empty()) return "error: empty command";
    const std::string& cmd = w[0];
    std::vector<Direction> dirs;
    if (cmd == "delay") {
      std::int64_t delay = 0, jitter = 0;
      if (w.size() < 3 || w.size() > 4 || !parse_dirs(w[1], dirs) || !parse_ms(w[2], delay) ||
          (w.size() == 4 && !parse_ms(w[3], jitter)))
        return "error: usage: delay c2s|s2c|both MS [JITTER_MS]";
      if (jitter > delay) return "error: jitter larger than the delay";
      for (Direction d : dirs) faults_[d].delay_ms = delay, faults_[d].jitter_ms = jitter;
      return "ok delay " + w[1] + " " + std::to_string(delay) + " " + std::to_string(jitter);
    }
    if (cmd == "blackhole" || cmd == "pause") {
      bool on = false;
      if (w.size() != 3 || !parse_dirs(w[1], dirs) || !parse_on_off(w[2], on))
        return "error: usage: " + cmd + " c2s|s2c|both on|off";
      for (Direction d : dirs) (cmd == "blackhole" ? faults_[d].blackhole : faults_[d].paused) = on;
      if (cmd == "pause" && !on) kick_all();
      return "ok " + cmd + " " + w[1] + " " + w[2];
    }
    if (cmd == "cut") {
      if (w.size() != 1) return "error: usage: cut";
      const std::size_t n = cut_all(/*reset=*/true);
      counters_.cut += n;
      return "ok cut " + std::to_string(n);
    }
    if (cmd == "refuse") {
      bool on = false;
      if (w.size() != 2 || !parse_on_off(w[1], on)) return "error: usage: refuse on|off";
      refuse_ = on;
      return "ok refuse " + w[1];
    }
    if (cmd == "reset") {
      faults_[0] = faults_[1] = DirectionFaults{};
      refuse_ = false;
      kick_all();
      return "ok reset";
    }
    if (cmd == "stats") {
      std::ostringstream s;
      s << "ok connections=" << connections_.size() << " accepted=" << counters_.accepted
        << " refused=" << counters_.refused << " cut=" << counters_.cut
        << " bytes_c2s=" << counters_.bytes[0] << " bytes_s2c=" << counters_.bytes[1]
        << " dropped_c2s=" << counters_.dropped[0] << " dropped_s2c=" << counters_.dropped[1];
      return s.str();
    }
    if (cmd == "quit") return "ok quit";
    return "error: unknown command '" + cmd.substr(0, 32) +
           "' (delay, blackhole, pause, cut, refuse, reset, stats, quit)";
  }

  void kick_all() {
    for (const auto& c : connections_) c->kick();
  }

  asio::io_context& io_;
  tcp::acceptor acceptor_;
  tcp::acceptor control_;
  tcp::resolver::results_type target_;
  Rng rng_;
  asio::signal_set signals_;
  DirectionFaults faults_[2];
  bool refuse_ = false;
  Counters counters_;
  std::set<std::shared_ptr<Connection>> connections_;
  std::vector<std::shared_ptr<tcp::socket>> control_sockets_;
};

Connection::Connection(Proxy& proxy, tcp::socket client)
    : proxy_(proxy), client_(std::move(client)), server_(proxy.io()) {
  pumps_[kClientToServer].dir = kClientToServer;
  pumps_[kClientToServer].from = &client_;
  pumps_[kClientToServer].to = &server_;
  pumps_[kServerToClient].dir = kServerToClient;
  pumps_[kServerToClient].from = &server_;
  pumps_[kServerToClient].to = &client_;
  for (Pump& p : pumps_) p.timer = std::make_unique<asio::steady_timer>(proxy.io());
}

void Connection::start(const tcp::resolver::results_type& target) {
  asio::async_connect(
      server_, target,
      [self = shared_from_this()](const asio::error_code& ec, const tcp::endpoint&) {
        if (self->closed_) return;
        if (ec) {
          // The target is down: the client sees its connection reset, as it
          // would without the proxy.
          self->close(/*reset=*/true);
          return;
        }
        asio::error_code ignore;
        self->connected_ = true;
        self->server_.set_option(tcp::no_delay(true), ignore);
        self->client_.set_option(tcp::no_delay(true), ignore);
        self->read(self->pumps_[kClientToServer]);
        self->read(self->pumps_[kServerToClient]);
      });
}

void Connection::close(bool reset) {
  if (closed_) return;
  closed_ = true;
  asio::error_code ignore;
  for (tcp::socket* s : {&client_, &server_}) {
    if (reset && s->is_open()) s->set_option(asio::socket_base::linger(true, 0), ignore);
    s->close(ignore);
  }
  for (Pump& p : pumps_) p.timer->cancel();
  proxy_.forget(shared_from_this());
}

void Connection::kick() {
  if (!connected_ || closed_) return;
  for (Pump& p : pumps_) {
    if (!p.held.empty() && !proxy_.faults(p.dir).paused) enqueue(p, std::exchange(p.held, {}));
    if (!p.reading && !p.eof) read(p);
  }
}

void Connection::read(Pump& p) {
  if (closed_ || p.reading || p.eof || proxy_.faults(p.dir).paused ||
      p.queued_bytes >= kMaxQueuedBytes)
    return;
  p.reading = true;
  p.from->async_read_some(asio::buffer(p.buffer), [self = shared_from_this(), &p](
                                                      const asio::error_code& ec, std::size_t n) {
    p.reading = false;
    if (self->closed_) return;
    if (ec) {
      if (ec == asio::error::eof) {
        p.eof = true;
        if (!p.writing && p.held.empty()) self->write_next(p);
      } else {
        self->close(/*reset=*/true);
      }
      return;
    }
    const DirectionFaults& faults = self->proxy_.faults(p.dir);
    if (faults.blackhole) {
      self->proxy_.counters().dropped[p.dir] += n;
    } else if (faults.paused) {
      p.held.append(p.buffer.data(), n);  // read() below posts nothing more while paused
    } else {
      self->enqueue(p, std::string(p.buffer.data(), n));
    }
    self->read(p);
  });
}

void Connection::enqueue(Pump& p, std::string data) {
  // Never release before the previous chunk: jitter must not reorder a byte stream.
  auto release = SteadyClock::now() + proxy_.draw_delay(p.dir);
  release = std::max(release, p.last_release);
  p.last_release = release;
  p.queued_bytes += data.size();
  p.queue.push_back({release, std::move(data)});
  if (!p.writing) write_next(p);
}

void Connection::write_next(Pump& p) {
  if (closed_) return;
  if (p.queue.empty()) {
    p.writing = false;
    if (p.eof && !p.shut_down) {
      p.shut_down = true;
      asio::error_code ignore;
      p.to->shutdown(tcp::socket::shutdown_send, ignore);
      maybe_finish();
    }
    return;
  }
  p.writing = true;
  Chunk& front = p.queue.front();
  if (front.release > SteadyClock::now()) {
    p.timer->expires_at(front.release);
    p.timer->async_wait([self = shared_from_this(), &p](const asio::error_code& ec) {
      if (ec || self->closed_) return;
      self->write_next(p);
    });
    return;
  }
  asio::async_write(*p.to, asio::buffer(front.data),
                    [self = shared_from_this(), &p](const asio::error_code& ec, std::size_t n) {
                      if (self->closed_) return;
                      if (ec) {
                        self->close(/*reset=*/true);
                        return;
                      }
                      self->proxy_.counters().bytes[p.dir] += n;
                      p.queued_bytes -= p.queue.front().data.size();
                      p.queue.pop_front();
                      self->read(p);  // no-op unless the full queue had stopped reading
                      self->write_next(p);
                    });
}

void Connection::maybe_finish() {
  if (pumps_[0].shut_down && pumps_[1].shut_down) close(/*reset=*/false);
}

int ctl_main(const std::string& address, const std::vector<std::string>& words) {
  std::string host, port;
  if (!split_host_port(address, host, port)) {
    std::cerr << "gossip-faultproxy ctl: bad control address '" << address
              << "' (expected HOST:PORT)\n";
    return 2;
  }
  std::string command;
  for (const auto& w : words) command += (command.empty() ? "" : " ") + w;
  try {
    asio::io_context io;
    tcp::socket s(io);
    asio::connect(s, tcp::resolver(io).resolve(host, port));
    asio::write(s, asio::buffer(command + "\n"));
    asio::streambuf buf;
    asio::read_until(s, buf, '\n');
    std::string reply;
    std::istream in(&buf);
    std::getline(in, reply);
    std::cout << reply << "\n";
    return reply.rfind("ok", 0) == 0 ? 0 : 1;
  } catch (const std::exception& e) {
    std::cerr << "gossip-faultproxy ctl: " << address << ": " << e.what() << "\n";
    return 1;
  }
}

int proxy_main(const std::string& listen, const std::string& target, const std::string& control,
               std::int64_t delay_ms, std::int64_t jitter_ms, std::uint64_t seed) {
  std::string lh, lp, th, tp, ch, cp;
  if (!split_host_port(listen, lh, lp) || !split_host_port(target, th, tp) ||
      !split_host_port(control, ch, cp)) {
    std::cerr << "gossip-faultproxy: addresses must be HOST:PORT (listen '" << listen
              << "', target '" << target << "', control '" << control << "')\n";
    return 2;
  }
  if (jitter_ms > delay_ms || delay_ms < 0 || jitter_ms < 0) {
    std::cerr << "gossip-faultproxy: need 0 <= --jitter-ms <= --delay-ms\n";
    return 2;
  }
  try {
    asio::io_context io;
    tcp::resolver resolver(io);
    auto target_ep = resolver.resolve(th, tp);
    auto listen_ep = *resolver.resolve(lh, lp).begin();
    auto control_ep = *resolver.resolve(ch, cp).begin();
    Proxy proxy(io, listen_ep.endpoint(), control_ep.endpoint(), target_ep, seed);
    for (Direction d : {kClientToServer, kServerToClient}) {
      proxy.faults(d).delay_ms = delay_ms;
      proxy.faults(d).jitter_ms = jitter_ms;
    }
    proxy.start();
    io.run();
  } catch (const std::exception& e) {
    std::cerr << "gossip-faultproxy: " << e.what() << "\n";
    return 1;
  }
  return 0;
}

}  // namespace
}  // namespace gossip::faultproxy

int main(int argc, char** argv) {
  CLI::App app{"gossip-faultproxy: fault-injecting TCP proxy (delay, jitter, blackhole, cut)"};
  app.require_subcommand(0, 1);
  std::string listen = "127.0.0.1:0", target, control = "127.0.0.1:0";
  std::int64_t delay_ms = 0, jitter_ms = 0;
  std::uint64_t seed = 1;
  app.add_option("--listen", listen, "HOST:PORT to accept clients on (port 0: any)");
  app.add_option("--target", target, "HOST:PORT to forward to");
  app.add_option("--control", control, "HOST:PORT of the control socket (keep it on loopback)");
  app.add_option("--delay-ms", delay_ms, "initial delay, both directions");
  app.add_option("--jitter-ms", jitter_ms, "initial jitter (uniform +-), both directions");
  app.add_option("--seed", seed, "seed of the jitter draws");
  auto* ctl = app.add_subcommand("ctl", "send one control command and print the reply");
  std::string ctl_address;
  std::vector<std::string> words;
  ctl->add_option("control", ctl_address, "HOST:PORT of a running proxy's control socket")
      ->required();
  ctl->add_option("command", words, "e.g. delay both 100 50 | blackhole c2s on | cut | stats")
      ->required();
  CLI11_PARSE(app, argc, argv);
  if (ctl->parsed()) return gossip::faultproxy::ctl_main(ctl_address, words);
  if (target.empty()) {
    std::cerr << "gossip-faultproxy: --target HOST:PORT is required\n";
    return 2;
  }
  return gossip::faultproxy::proxy_main(listen, target, control, delay_ms, jitter_ms, seed);
}
