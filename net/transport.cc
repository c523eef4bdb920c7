// Transport (see transport.h): the facade, and Transport::Impl's lifecycle — validating options,
// listening, dialing with backoff, the bookkeeping of established and lost links, shutdown, the
// link state callers read, and control messages. The connection itself is net/session.cc, the
// receive side net/recv_slots.cc, the exchange net/exchange.cc (net/transport_impl.h lists them).
#include "net/transport.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>

#include "common/check.h"
#include "common/log.h"
#include "net/frame.h"
#include "net/session.h"
#include "net/transport_impl.h"

namespace gossip::net {

Deadline deadline_in_ms(std::int64_t ms) {
  return SteadyClock::now() + std::chrono::milliseconds(ms);
}

namespace {
std::string first_line_of(const char* path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}
}  // namespace

Status set_congestion_control(int fd, const std::string& name) {
  if (::setsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, name.data(),
                   static_cast<socklen_t>(name.size())) != 0) {
    return io_error("TCP_CONGESTION " + name + ": " + std::strerror(errno));
  }
  return Status::ok();
}

Status check_congestion_control(const std::string& name) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return io_error(std::string("socket(): ") + std::strerror(errno));
  const Status s = set_congestion_control(fd, name);  // a probe socket, closed unused
  ::close(fd);
  if (s.is_ok()) return s;
  return invalid_argument("TCP congestion control '" + name + "' cannot be used here (" +
                          s.message() + "); this kernel has: " +
                          first_line_of("/proc/sys/net/ipv4/tcp_available_congestion_control") +
                          "; an unprivileged process may choose: " +
                          first_line_of("/proc/sys/net/ipv4/tcp_allowed_congestion_control"));
}

Result<CongestionChoice> choose_congestion_control(const std::string& configured) {
  const std::string host = first_line_of("/proc/sys/net/ipv4/tcp_congestion_control");
  if (configured == "host" || configured.empty())
    return CongestionChoice{"", "the host's default (" + host + ")"};
  if (configured != "auto") {
    GOSSIP_RETURN_IF_ERROR(check_congestion_control(configured));
    return CongestionChoice{configured, configured + " (configured)"};
  }
  if (host.rfind("bbr", 0) != 0) {
    return CongestionChoice{"", "auto: the host's default (" + host + ")"};
  }
  for (const char* name : {"cubic", "reno"}) {
    if (check_congestion_control(name).is_ok()) {
      return CongestionChoice{name, std::string("auto: ") + name + " in place of the host's " +
                                        host + " (idle links of a time-varying topology)"};
    }
  }
  return CongestionChoice{"", "auto: the host's default (" + host +
                                  "); neither cubic nor reno may be set by this process"};
}

Transport::Impl::Impl(TransportOptions options) : opts_(std::move(options)) {
  model_bytes_ = opts_.self.param_count * sizeof(float);
  degree_ = opts_.degree;
  iteration_ = opts_.iteration;
}

Status Transport::Impl::init() {
  const Identity& self = opts_.self;
  if (self.node_id < 0) return invalid_argument("node id must be >= 0");
  if (self.job_id.empty() || self.job_id.size() > 128) {
    return invalid_argument("job id must be 1 to 128 characters");
  }
  if (self.param_count == 0 || self.param_count > (std::uint64_t{1} << 36)) {
    return invalid_argument("parameter count " + std::to_string(self.param_count) +
                            " outside [1, 2^36]");
  }
  if (opts_.chunk_bytes < 4096 || opts_.chunk_bytes % 4 != 0) {
    return invalid_argument("chunk size must be a multiple of 4 bytes and at least 4096");
  }
  if (!opts_.congestion_control.empty()) {
    GOSSIP_RETURN_IF_ERROR(check_congestion_control(opts_.congestion_control));
  }
  if (opts_.handshake_timeout_ms <= 0 || opts_.heartbeat_interval_ms <= 0 ||
      opts_.peer_timeout_ms <= opts_.heartbeat_interval_ms) {
    return invalid_argument(
        "timeouts must be positive and peer_timeout_ms > heartbeat_interval_ms");
  }
  for (const PeerAddress& a : opts_.neighbours) {
    if (a.node_id < 0 || a.node_id == self.node_id) {
      return invalid_argument("neighbour id " + std::to_string(a.node_id) + " is invalid");
    }
    if (peers_.count(a.node_id)) {
      return invalid_argument("neighbour " + std::to_string(a.node_id) + " listed twice");
    }
    Peer& p = peers_[a.node_id];
    p.addr = a;
    p.we_dial = self.node_id < a.node_id;
    if (p.we_dial && (a.host.empty() || a.port == 0)) {
      return invalid_argument("neighbour " + std::to_string(a.node_id) +
                              " needs a host:port (this node dials it)");
    }
    p.backoff_ms = opts_.connect_backoff_initial_ms;
    p.floor = opts_.initial_floor;
    p.retry = std::make_unique<asio::steady_timer>(io_);
    p.resolver = std::make_unique<tcp::resolver>(io_);
  }
  if (!opts_.insecure) {
    GOSSIP_ASSIGN_OR_RETURN(ssl_, make_tls_context(opts_.tls));
    // Our own certificate: valid now, chained to the cluster CA, naming this node and job — so a
    // bad one fails here, naming the file, rather than at every neighbour's handshake.
    if (opts_.check_own_certificate) {
      GOSSIP_RETURN_IF_ERROR(
          check_own_certificate(opts_.tls, CertIdentity{opts_.self.node_id, opts_.self.job_id}));
    }
  }

  asio::error_code ec;
  tcp::resolver resolver(io_);
  auto results = resolver.resolve(opts_.listen_host, std::to_string(opts_.listen_port),
                                  tcp::resolver::passive, ec);
  if (ec || results.empty()) {
    return invalid_argument("cannot resolve listen address " + opts_.listen_host + ": " +
                            ec.message());
  }
  const tcp::endpoint ep = results.begin()->endpoint();
  acceptor_.open(ep.protocol(), ec);
  if (!ec) acceptor_.set_option(tcp::acceptor::reuse_address(true), ec);
  if (!ec) acceptor_.bind(ep, ec);
  if (!ec) acceptor_.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) {
    return unavailable("cannot listen on " + opts_.listen_host + ":" +
                       std::to_string(opts_.listen_port) + ": " + ec.message());
  }
  port_ = acceptor_.local_endpoint(ec).port();
  if (opts_.insecure) {
    GOSSIP_LOG(kWarning) << "net: *** INSECURE MODE *** node " << self.node_id
                         << " uses plaintext, unauthenticated links: anyone who can reach "
                         << opts_.listen_host << ":" << port_
                         << " can read and inject parameters. Use only on trusted networks.";
  }
  return Status::ok();
}

pb::Hello Transport::Impl::local_hello() const {
  std::lock_guard l(mu_);
  pb::Hello hello = make_hello(opts_.self, degree_, iteration_);
  if (ssl_) hello.set_payload_crc_optional(true);
  return hello;
}

void Transport::Impl::do_accept() {
  if (stopping_) return;
  auto s = std::make_shared<Session>(*this, /*dialer=*/false, /*expected_peer=*/-1);
  acceptor_.async_accept(s->socket(), [this, s](const asio::error_code& ec) {
    if (stopping_) return;
    if (!ec) {
      sessions_.insert(s);
      {
        std::lock_guard l(mu_);
        live_sessions_ = sessions_.size();
      }
      s->start_accepted();
    } else if (ec == asio::error::operation_aborted) {
      return;
    }
    do_accept();
  });
}

void Transport::Impl::dial(Peer& p) {
  if (stopping_ || p.session || p.pending) return;
  auto s = std::make_shared<Session>(*this, /*dialer=*/true, p.addr.node_id);
  s->set_remote(p.addr.host + ":" + std::to_string(p.addr.port));
  p.pending = s;
  sessions_.insert(s);
  {
    std::lock_guard l(mu_);
    live_sessions_ = sessions_.size();
  }
  const int id = p.addr.node_id;
  p.resolver->async_resolve(
      p.addr.host, std::to_string(p.addr.port),
      [this, s, id](const asio::error_code& ec, const tcp::resolver::results_type& results) {
        if (ec) {
          s->close(unavailable("cannot resolve " + peers_.at(id).addr.host + ": " + ec.message()));
          return;
        }
        s->start_dial(results);
      });
}

void Transport::Impl::schedule_redial(Peer& p) {
  if (stopping_) return;
  p.retry->expires_after(std::chrono::milliseconds(p.backoff_ms));
  p.backoff_ms = std::min(p.backoff_ms * 2, opts_.connect_backoff_max_ms);
  const int id = p.addr.node_id;
  p.retry->async_wait([this, id](const asio::error_code& ec) {
    if (!ec) dial(peers_.at(id));
  });
}

void Transport::Impl::on_tick() {
  if (stopping_) return;
  const std::int64_t now = now_ms();
  std::vector<std::shared_ptr<Session>> all(sessions_.begin(), sessions_.end());
  for (auto& s : all) s->on_tick(now);
  const std::int64_t period = std::clamp<std::int64_t>(opts_.heartbeat_interval_ms / 2, 5, 100);
  tick_.expires_after(std::chrono::milliseconds(period));
  tick_.async_wait([this](const asio::error_code& ec) {
    if (!ec) on_tick();
  });
}

void Transport::Impl::on_established(const std::shared_ptr<Session>& s, int id,
                                     const pb::Hello& hello) {
  Peer& p = peers_.at(id);
  if (p.session && p.session != s) {
    p.session->close(unavailable("replaced by a newer connection from " + node_name(id)));
  }
  // Staging with no link before this one was kept from a link closed by Goodbye (fail_peer drops
  // it otherwise). The peer is back (a restart resumes from its checkpoint and sends again): that
  // staging is not what this link will deliver.
  if (!p.session) p.staging.reset();
  p.session = s;
  if (p.pending == s) p.pending.reset();
  p.backoff_ms = opts_.connect_backoff_initial_ms;
  {
    std::lock_guard l(mu_);
    connected_.insert(id);
    hellos_[id] = hello;
    peer_iterations_[id] = hello.iteration();
    stats_.connections_established++;
  }
  cv_.notify_all();
  GOSSIP_LOG(kDebug) << "net: node " << opts_.self.node_id << " connected to " << node_name(id)
                     << (opts_.insecure ? " (insecure)" : " (TLS 1.3)");
  while (!p.waiting.empty()) {
    OutFrame f = std::move(p.waiting.front());
    p.waiting.pop_front();
    if (f.op && f.op->resolved) continue;
    s->enqueue(std::move(f));
  }
}

void Transport::Impl::on_session_closed(const std::shared_ptr<Session>& s, const Status& why) {
  sessions_.erase(s);
  {
    std::lock_guard l(mu_);
    live_sessions_ = sessions_.size();
  }
  cv_.notify_all();
  const int id = s->peer();
  auto it = peers_.find(id);
  if (it == peers_.end()) return;
  Peer& p = it->second;
  if (p.session == s) {
    p.session.reset();
    {
      std::lock_guard l(mu_);
      connected_.erase(id);
      hellos_.erase(id);
      peer_iterations_.erase(id);
      link_errors_[id] = "link lost: " + why.message();
    }
    // A peer that says Goodbye has sent everything of the iterations it finished (its data
    // precedes the Goodbye): a whole iteration already staged stays for the receive to come.
    fail_peer(p, unavailable("link to " + node_name(id) + " lost: " + why.message()),
              s->peer_said_goodbye());
    if (p.we_dial) schedule_redial(p);
  } else if (p.pending == s) {
    p.pending.reset();
    note_link_failure(p, why, /*our_dial=*/true);
    schedule_redial(p);
  } else if (!s->was_established()) {
    note_link_failure(p, why, /*our_dial=*/false);  // its dial, refused or failed mid-handshake
  }
}

void Transport::Impl::note_link_failure(Peer& p, const Status& why, bool our_dial) {
  const int id = p.addr.node_id;
  {
    std::lock_guard l(mu_);
    link_errors_[id] = why.message();
  }
  if (stopping_ || !our_dial) return;  // refusals of its dials are logged where they happen
  if (p.logged_causes.size() >= Peer::kMaxLoggedCauses ||
      !p.logged_causes.insert(why.message()).second) {
    return;
  }
  const std::string line = "net: node " + std::to_string(opts_.self.node_id) +
                           " cannot reach neighbour " + node_name(id) + " at " + p.addr.host + ":" +
                           std::to_string(p.addr.port) + ": " + why.message() +
                           " (retrying every " + std::to_string(opts_.connect_backoff_max_ms) +
                           " ms at most; each cause is logged once)";
  // A name that does not resolve is a configuration error more often than a transient one (a
  // neighbour that is not listening yet is the normal start of a job).
  if (why.message().rfind("cannot resolve", 0) == 0) {
    GOSSIP_LOG(kWarning) << line;
  } else {
    GOSSIP_LOG(kInfo) << line;
  }
}

std::string Transport::Impl::describe_unconnected(std::span<const int> peers) const {
  std::lock_guard l(mu_);
  std::string out;
  for (int id : peers) {
    if (connected_.count(id)) continue;
    auto it = peers_.find(id);  // peers_ itself is fixed after init(): its addresses may be read
    if (it == peers_.end()) continue;
    const Peer& p = it->second;
    out += out.empty() ? "" : "; ";
    out += node_name(id);
    out += p.we_dial ? " at " + p.addr.host + ":" + std::to_string(p.addr.port)
                     : std::string(" (it dials this node)");
    auto e = link_errors_.find(id);
    if (e != link_errors_.end()) {
      out += ": " + e->second;
    } else {
      out += p.we_dial ? ": no dial finished yet" : ": no connection from it yet";
    }
  }
  return out;
}

void Transport::Impl::fail_everything(const Status& s) {
  for (auto& [id, p] : peers_) {
    fail_peer(p, s);
    for (auto& f : p.waiting) {
      if (f.op) f.op->finish(s);
    }
    p.waiting.clear();
  }
}

void Transport::Impl::begin_shutdown() {
  stopping_ = true;
  asio::error_code ignored;
  acceptor_.close(ignored);
  tick_.cancel();
  for (auto& [id, p] : peers_) {
    p.retry->cancel();
    p.resolver->cancel();
  }
  std::vector<std::shared_ptr<Session>> all(sessions_.begin(), sessions_.end());
  for (auto& s : all) s->goodbye("node " + std::to_string(opts_.self.node_id) + " shutting down");
}

void Transport::Impl::shutdown(std::int64_t flush_timeout_ms) {
  {
    std::lock_guard l(mu_);
    if (shut_down_) return;
    shut_down_ = true;
  }
  asio::post(io_, [this] { begin_shutdown(); });
  {
    std::unique_lock l(mu_);
    cv_.wait_until(l, deadline_in_ms(flush_timeout_ms), [&] { return live_sessions_ == 0; });
  }
  asio::post(io_, [this] {
    std::vector<std::shared_ptr<Session>> all(sessions_.begin(), sessions_.end());
    for (auto& s : all) s->close(unavailable("transport shut down"));
    for (auto& [id, p] : peers_) p.pending.reset();
  });
  work_.reset();
  // Everything is closed or cancelled; give handlers a moment to drain, then stop regardless.
  {
    std::unique_lock l(mu_);
    cv_.wait_until(l, deadline_in_ms(200), [&] { return live_sessions_ == 0; });
  }
  io_.stop();
  if (thread_.joinable()) thread_.join();
  // The io thread is gone: close what is left from here, then nothing touches caller buffers.
  stopping_ = true;
  std::vector<std::shared_ptr<Session>> left(sessions_.begin(), sessions_.end());
  for (auto& s : left) s->close(unavailable("transport shut down"));
  fail_everything(unavailable("transport shut down"));
  for (auto& w : live_exchanges_) {
    if (auto st = w.lock()) {
      std::lock_guard l(st->mu);
      st->io_busy = 0;
      st->cv.notify_all();
    }
  }
  sessions_.clear();
  for (auto& [id, p] : peers_) {
    p.session.reset();
    p.pending.reset();
  }
}

bool Transport::Impl::wait_connected(std::span<const int> peers, Deadline deadline) {
  std::unique_lock l(mu_);
  return cv_.wait_until(l, deadline, [&] {
    for (int p : peers) {
      if (!connected_.count(p)) return false;
    }
    return true;
  });
}

std::vector<int> Transport::Impl::connected_peers() const {
  std::lock_guard l(mu_);
  return {connected_.begin(), connected_.end()};
}

std::optional<pb::Hello> Transport::Impl::peer_hello(int peer) const {
  std::lock_guard l(mu_);
  auto it = hellos_.find(peer);
  if (it == hellos_.end()) return std::nullopt;
  return it->second;
}

void Transport::Impl::set_local_state(std::uint32_t degree, std::uint64_t iteration) {
  std::lock_guard l(mu_);
  degree_ = degree;
  iteration_ = iteration;
}

void Transport::Impl::note_peer_iteration(int peer, std::uint64_t iteration) {
  std::lock_guard l(mu_);
  if (connected_.count(peer)) {
    auto& it = peer_iterations_[peer];
    it = std::max(it, iteration);
  }
}

Status Transport::Impl::on_heartbeat(int peer, const pb::Heartbeat& hb) {
  note_peer_iteration(peer, hb.iteration());
  if (hb.control().empty()) return Status::ok();
  if (control_handler_) return control_handler_(peer, hb.control());
  // No consumer yet (it registers after start()): hold the message for it, within a bound.
  if (held_control_.size() < kMaxHeldControl) {
    held_control_.emplace_back(peer, hb.control());
    return Status::ok();
  }
  std::uint64_t dropped = 0;
  {
    std::lock_guard l(mu_);
    dropped = ++stats_.control_dropped;
  }
  if (dropped == 1) {
    GOSSIP_LOG(kWarning) << "net: " << kMaxHeldControl << " control messages held and no handler "
                         << "set; dropping further ones (first from " << node_name(peer) << ")";
  }
  return Status::ok();
}

void Transport::Impl::set_control_handler(ControlHandler handler) {
  std::lock_guard l(mu_);
  if (shut_down_) return;
  asio::post(io_, [this, handler = std::move(handler)]() mutable {
    control_handler_ = std::move(handler);
    if (!control_handler_) return;
    std::deque<std::pair<int, std::string>> held;
    held.swap(held_control_);
    for (const auto& [peer, control] : held) {
      // The link it came by may be gone: the refusal is counted and logged, nothing is closed.
      if (Status s = control_handler_(peer, control); !s.is_ok()) {
        count(&TransportStats::bad_frames);
        GOSSIP_LOG(kWarning) << "net: bad control message from " << node_name(peer) << ": "
                             << s.to_string();
      }
    }
  });
}

void Transport::Impl::send_control(int peer, std::string control) {
  GOSSIP_CHECK(peers_.count(peer)) << "control message to " << peer << ", not a neighbour";
  pb::Heartbeat hb;
  hb.set_sender(static_cast<std::uint32_t>(opts_.self.node_id));
  hb.set_iteration(local_iteration());
  hb.set_control(std::move(control));
  auto frame = std::make_shared<const std::string>(encode_frame(FrameType::kHeartbeat, hb));
  std::lock_guard l(mu_);
  if (shut_down_) return;
  asio::post(io_, [this, peer, frame] {
    if (stopping_) return;
    Peer& p = peers_.at(peer);
    if (p.session) p.session->enqueue({frame, {}, {}});
  });
}

std::optional<std::uint64_t> Transport::Impl::peer_iteration(int peer) const {
  std::lock_guard l(mu_);
  auto it = peer_iterations_.find(peer);
  if (it == peer_iterations_.end()) return std::nullopt;
  return it->second;
}

void Transport::Impl::skip_before(int peer, std::uint64_t iteration) {
  GOSSIP_CHECK(peers_.count(peer)) << "skip_before for " << peer << ", not a neighbour";
  std::lock_guard l(mu_);
  if (shut_down_) return;
  asio::post(io_, [this, peer, iteration] {
    if (stopping_) return;
    advance_floor(peers_.at(peer), iteration);
  });
}

void Transport::Impl::reset_floor(int peer, std::uint64_t floor) {
  GOSSIP_CHECK(peers_.count(peer)) << "reset_floor for " << peer << ", not a neighbour";
  const auto apply = [this, peer, floor] {
    if (stopping_) return;
    Peer& p = peers_.at(peer);
    while (!p.recvs.empty() && p.recvs.begin()->first < floor) {  // abandoned ones, if any
      fail_recv(p, p.recvs.begin()->second,
                failed_precondition("receive from " + node_name(peer) + " below the floor"));
    }
    p.floor = floor;
    if (p.staging && p.staging->iteration < p.floor && !p.staging->reading) p.staging.reset();
    resume_reader(p);
  };
  if (io_.get_executor().running_in_this_thread()) {
    apply();  // from a control handler: before the next frame of the link is read
    return;
  }
  std::lock_guard l(mu_);
  if (shut_down_) return;
  asio::post(io_, apply);
}

TransportStats Transport::Impl::stats() const {
  std::lock_guard l(mu_);
  return stats_;
}

Result<std::unique_ptr<Transport>> Transport::start(TransportOptions options) {
  auto impl = std::make_shared<Impl>(std::move(options));
  GOSSIP_RETURN_IF_ERROR(impl->init());
  Impl* raw = impl.get();
  asio::post(raw->io_, [raw] {
    raw->do_accept();
    for (auto& [id, p] : raw->peers_) {
      if (p.we_dial) raw->dial(p);
    }
    raw->on_tick();
  });
  raw->thread_ = std::thread([raw] { raw->run_io(); });
  return std::unique_ptr<Transport>(new Transport(std::move(impl)));
}

Transport::Transport(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}
Transport::~Transport() { shutdown(); }

std::uint16_t Transport::port() const { return impl_->port_; }
int Transport::node_id() const { return impl_->options().self.node_id; }

std::shared_ptr<Exchange> Transport::exchange(std::uint64_t iteration, std::span<const float> data,
                                              std::span<const int> to,
                                              std::span<const RecvSpec> recvs) {
  return impl_->exchange(iteration, data, to, recvs);
}

void Transport::send(int peer, std::uint64_t iteration, std::span<const float> data,
                     std::function<void(Status)> done) {
  impl_->send(peer, iteration, data, std::move(done));
}

bool Transport::wait_connected(std::span<const int> peers, Deadline deadline) {
  return impl_->wait_connected(peers, deadline);
}
std::vector<int> Transport::connected_peers() const { return impl_->connected_peers(); }
std::string Transport::describe_unconnected(std::span<const int> peers) const {
  return impl_->describe_unconnected(peers);
}
std::optional<pb::Hello> Transport::peer_hello(int peer) const { return impl_->peer_hello(peer); }
void Transport::set_local_state(std::uint32_t degree, std::uint64_t iteration) {
  impl_->set_local_state(degree, iteration);
}
TransportStats Transport::stats() const { return impl_->stats(); }
std::optional<Status> Transport::config_mismatch() const { return impl_->config_mismatch(); }
void Transport::send_control(int peer, std::string control) {
  impl_->send_control(peer, std::move(control));
}
void Transport::set_control_handler(ControlHandler handler) {
  impl_->set_control_handler(std::move(handler));
}
std::optional<std::uint64_t> Transport::peer_iteration(int peer) const {
  return impl_->peer_iteration(peer);
}
void Transport::skip_before(int peer, std::uint64_t iteration) {
  impl_->skip_before(peer, iteration);
}
void Transport::reset_floor(int peer, std::uint64_t floor) { impl_->reset_floor(peer, floor); }
void Transport::shutdown(std::int64_t flush_timeout_ms) { impl_->shutdown(flush_timeout_ms); }

}  // namespace gossip::net
