// Transport: the io thread, peer links and the per-iteration exchange (see transport.h).
//
// Structure (after Asio's HTTP server example): Transport::Impl owns the io_context, the acceptor
// and one Peer record per neighbour; a Session is one TCP (or TLS) connection, a
// shared_from_this object with a read loop and a write queue. A Peer outlives its sessions: the
// receive slots, the one-iteration-ahead staging buffer and the frames waiting for a connection
// live there, so a reconnect does not lose what the caller posted.
//
// Everything below except ExchangeState's mutex-guarded fields and Impl's `mu_` fields is touched
// by the io thread only. Handlers never throw: every Asio call uses the error_code overloads.
#include "net/transport.h"

#include <openssl/ssl.h>
#include <sys/mman.h>

#include <asio.hpp>
#include <condition_variable>
#include <cstdlib>
#include <deque>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include "common/check.h"
#include "common/log.h"
#include "net/checksum.h"
#include "net/frame.h"

namespace gossip::net {

using tcp = asio::ip::tcp;
using SteadyClock = std::chrono::steady_clock;
using SslStream = TlsStream;

Deadline deadline_in_ms(std::int64_t ms) {
  return SteadyClock::now() + std::chrono::milliseconds(ms);
}

namespace {

std::int64_t now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             SteadyClock::now().time_since_epoch())
      .count();
}

std::string node_name(int id) { return "node " + std::to_string(id); }

// Asio's transfer_all caps every read_some/write_some at 64 KiB; for multi-MiB chunks that means
// 16x more syscalls than needed. This condition asks for everything that is left.
struct TransferRest {
  std::size_t operator()(const asio::error_code& ec, std::size_t transferred) const {
    return ec || transferred >= total ? 0 : total - transferred;
  }
  std::size_t total;
};

}  // namespace

// Shared between the io thread (which completes operations) and the caller (which waits).
struct ExchangeState {
  std::weak_ptr<Transport::Impl> transport;
  std::uint64_t iteration = 0;

  std::mutex mu;
  std::condition_variable cv;
  // Guarded by mu.
  std::deque<ChunkEvent> events;
  int unresolved_recvs = 0;
  int unresolved_sends = 0;
  int io_busy = 0;  // Asio operations in flight on the caller's buffers
  std::vector<PeerFailure> failures;
  bool abandon_posted = false;

  void add_event(const ChunkEvent& e) {
    std::lock_guard l(mu);
    events.push_back(e);
    cv.notify_all();
  }
  void resolve(bool is_recv, int peer, const Status& s) {
    std::lock_guard l(mu);
    (is_recv ? unresolved_recvs : unresolved_sends) -= 1;
    if (!s.is_ok()) failures.push_back({peer, s});
    cv.notify_all();
  }
  void busy(int delta) {
    std::lock_guard l(mu);
    io_busy += delta;
    if (io_busy == 0) cv.notify_all();
  }
};

namespace {

struct FreeDeleter {
  void operator()(float* p) const { std::free(p); }
};

// Memory for one iteration ahead of a neighbour (`floats` floats), mapped in at once and in
// transparent huge pages where the kernel offers them: touched page by page as chunks land, a
// 100 MB staging buffer took ~25 600 page faults of ~14 us each on the benchmark VM, spread over
// the first iterations' receives (docs/net.md, "TLS records straight to the stream, staging memory
// in huge pages"); with 2 MiB pages, populated here, it takes a few ms, once. Both advices are
// hints: a kernel without them faults pages in lazily.
std::unique_ptr<float[], FreeDeleter> staging_buffer(std::size_t floats) {
  constexpr std::size_t kHuge = std::size_t{2} << 20;
  const std::size_t bytes = (floats * sizeof(float) + kHuge - 1) / kHuge * kHuge;
  auto* p = static_cast<float*>(std::aligned_alloc(kHuge, std::max(bytes, kHuge)));
  GOSSIP_CHECK(p != nullptr) << "cannot allocate " << bytes << " bytes of staging memory";
#ifdef MADV_HUGEPAGE
  ::madvise(p, bytes, MADV_HUGEPAGE);
#endif
#ifdef MADV_POPULATE_WRITE
  ::madvise(p, bytes, MADV_POPULATE_WRITE);
#endif
  return std::unique_ptr<float[], FreeDeleter>(p);
}

// A posted receive (or, with ex == nullptr, the staging buffer for one iteration ahead).
struct RecvSlot {
  int peer = -1;
  std::uint64_t iteration = 0;
  std::span<float> buffer;
  std::shared_ptr<ExchangeState> ex;
  std::vector<std::pair<std::size_t, std::size_t>> chunks;  // staging only: (offset, count)
  std::uint32_t chunk_count = 0;
  std::uint32_t next_chunk = 0;
  std::uint64_t next_offset = 0;  // bytes
  bool resolved = false;
  bool reading = false;  // a payload read into `buffer` is in flight

  bool complete() const { return chunk_count > 0 && next_chunk == chunk_count; }
};

struct SendOp {
  int peer = -1;
  std::uint64_t iteration = 0;
  std::shared_ptr<ExchangeState> ex;
  std::function<void(Status)> done;
  std::uint32_t chunks_left = 0;
  int writing = 0;  // frames of this op currently being written
  bool resolved = false;

  void finish(const Status& s) {
    if (resolved) return;
    resolved = true;
    const Status st = s.is_ok() ? s
                                : s.with_context("sending iteration " + std::to_string(iteration) +
                                                 " to " + node_name(peer));
    if (ex) ex->resolve(false, peer, st);
    if (done) done(st);
  }
};

struct OutFrame {
  std::shared_ptr<const std::string> head;  // frame header + message
  asio::const_buffer payload;               // the caller's memory (Params) or empty
  std::shared_ptr<SendOp> op;               // null for control frames
};

}  // namespace

class Session;

struct Peer {
  PeerAddress addr;
  bool we_dial = false;
  std::shared_ptr<Session> session;  // established link, if any
  std::shared_ptr<Session> pending;  // our dial attempt in progress
  std::deque<OutFrame> waiting;      // frames posted while there was no link
  std::map<std::uint64_t, std::shared_ptr<RecvSlot>> recvs;
  std::shared_ptr<RecvSlot> staging;
  // Backing memory of `staging`, allocated on first use and kept (staging_buffer()). One session
  // reads at a time, so slots never overlap in it.
  std::unique_ptr<float[], FreeDeleter> staging_memory;
  std::uint64_t floor = 0;  // frames for iterations below this are stale
  std::int64_t backoff_ms = 0;
  std::unique_ptr<asio::steady_timer> retry;
  std::unique_ptr<tcp::resolver> resolver;
};

class Transport::Impl : public std::enable_shared_from_this<Transport::Impl> {
 public:
  explicit Impl(TransportOptions options);
  Status init();
  void run_io() { io_.run(); }

  // ---- called from any thread
  std::shared_ptr<Exchange> exchange(std::uint64_t iteration, std::span<const float> data,
                                     std::span<const int> to, std::span<const RecvSpec> recvs);
  void send(int peer, std::uint64_t iteration, std::span<const float> data,
            std::function<void(Status)> done);
  void post_abandon(std::shared_ptr<ExchangeState> state);
  void shutdown(std::int64_t flush_timeout_ms);
  bool wait_connected(std::span<const int> peers, Deadline deadline);
  std::vector<int> connected_peers() const;
  std::optional<pb::Hello> peer_hello(int peer) const;
  void set_local_state(std::uint32_t degree, std::uint64_t iteration);
  TransportStats stats() const;
  std::optional<Status> config_mismatch() const {
    std::lock_guard l(mu_);
    return config_mismatch_;
  }
  void note_config_mismatch(const Status& why) {
    std::lock_guard l(mu_);
    if (!config_mismatch_) config_mismatch_ = why;
  }
  void send_control(int peer, const pb::Control& control);
  std::optional<std::uint64_t> peer_iteration(int peer) const;
  void skip_before(int peer, std::uint64_t iteration);

  // ---- io thread
  std::uint64_t local_iteration() const {
    std::lock_guard l(mu_);
    return iteration_;
  }
  void on_heartbeat(int peer, const pb::Heartbeat& hb);
  void note_peer_iteration(int peer, std::uint64_t iteration);
  const TransportOptions& options() const { return opts_; }
  std::uint64_t model_bytes() const { return model_bytes_; }
  asio::io_context& io() { return io_; }
  asio::ssl::context* ssl() { return ssl_.get(); }
  pb::Hello local_hello() const;
  bool is_neighbour(int id) const { return peers_.count(id) != 0; }
  Peer& peer(int id) { return peers_.at(id); }
  void on_established(const std::shared_ptr<Session>& s, int id, const pb::Hello& hello);
  void on_session_closed(const std::shared_ptr<Session>& s, const Status& why);
  // Where the payload of a Params frame goes; decided when its header has been parsed.
  struct Target {
    enum Kind { kInto, kDiscard, kPause, kBad } kind;
    std::shared_ptr<RecvSlot> slot;
    Status status;
  };
  Target classify(Peer& p, const pb::Params& params);
  void chunk_received(Peer& p, const std::shared_ptr<RecvSlot>& slot, const pb::Params& params,
                      std::uint64_t len);
  void count(std::uint64_t TransportStats::*field, std::uint64_t n = 1) {
    std::lock_guard l(mu_);
    stats_.*field += n;
  }
  std::uint16_t port_ = 0;

 private:
  friend class Transport;
  using Frame = std::pair<std::shared_ptr<const std::string>, asio::const_buffer>;
  std::uint32_t chunk_count(std::uint64_t num_bytes) const;
  // The Params frame of chunk `index`; with `checksum` false the CRC32C is omitted (TLS only).
  Frame make_frame(std::uint64_t iteration, std::span<const float> data, std::uint32_t index,
                   bool checksum) const;
  // Whether Params to these peers must carry a CRC32C: on plaintext links always; on TLS links
  // unless every one of them is connected and announced payload_crc_optional. Caller holds mu_.
  bool checksums_needed(std::span<const int> to) const;
  void post_frame(const std::shared_ptr<SendOp>& op, const Frame& frame);
  void post_recv(const std::shared_ptr<RecvSlot>& slot);
  void abandon(const std::shared_ptr<ExchangeState>& state);
  void drain_staging(Peer& p, std::shared_ptr<RecvSlot> slot);
  void complete_recv(Peer& p, std::shared_ptr<RecvSlot> slot);
  void fail_recv(Peer& p, std::shared_ptr<RecvSlot> slot, const Status& s);
  void advance_floor(Peer& p, std::uint64_t floor);
  void resume_reader(Peer& p);
  // Resolves the peer's posted receives with `s` and drops its staging, unless
  // `keep_complete_staging` and the staging holds a whole iteration: then it outlives the link (a
  // receive posted later takes it; a new link drops it, see on_established).
  void fail_peer(Peer& p, const Status& s, bool keep_complete_staging = false);
  void dial(Peer& p);
  void schedule_redial(Peer& p);
  void do_accept();
  void on_tick();
  void begin_shutdown();
  void fail_everything(const Status& s);

  TransportOptions opts_;
  std::uint64_t model_bytes_ = 0;
  asio::io_context io_{1};
  asio::executor_work_guard<asio::io_context::executor_type> work_{io_.get_executor()};
  std::shared_ptr<asio::ssl::context> ssl_;
  tcp::acceptor acceptor_{io_};
  asio::steady_timer tick_{io_};
  std::thread thread_;
  std::map<int, Peer> peers_;                                 // io thread
  std::set<std::shared_ptr<Session>> sessions_;               // io thread: every live session
  std::vector<std::weak_ptr<ExchangeState>> live_exchanges_;  // io thread, for shutdown
  bool stopping_ = false;                                     // io thread

  mutable std::mutex mu_;  // guards the fields below
  std::condition_variable cv_;
  TransportStats stats_;
  std::optional<Status>
      config_mismatch_;  // the first Hello we refused for a configuration mismatch
  std::set<int> connected_;
  std::map<int, pb::Hello> hellos_;
  std::map<int, std::uint64_t> peer_iterations_;
  std::uint32_t degree_ = 0;
  std::uint64_t iteration_ = 0;
  std::size_t live_sessions_ = 0;
  bool shut_down_ = false;
};

// One connection. Lifetime: shared_ptr held by Impl::sessions_ (and Peer) and by every pending
// handler; closed exactly once.
class Session : public std::enable_shared_from_this<Session> {
 public:
  enum class Phase { kConnecting, kTls, kHello, kEstablished, kClosed };

  Session(Transport::Impl& t, bool dialer, int expected_peer)
      : t_(t), dialer_(dialer), peer_(expected_peer) {
    if (t_.ssl() != nullptr) {
      tls_ = std::make_unique<SslStream>(t_.io(), *t_.ssl());
      keep_record_buffers(*tls_);
    } else {
      plain_ = std::make_unique<tcp::socket>(t_.io());
    }
    deadline_ms_ = now_ms() + t_.options().handshake_timeout_ms;
  }

  tcp::socket& socket() { return tls_ ? tls_socket(*tls_) : *plain_; }
  int peer() const { return peer_; }
  bool established() const { return phase_ == Phase::kEstablished; }
  bool paused() const { return paused_; }
  bool peer_said_goodbye() const { return peer_said_goodbye_; }
  std::string describe() const {
    return peer_ >= 0 ? node_name(peer_) + " (" + remote_ + ")" : remote_;
  }

  void start_dial(const tcp::resolver::results_type& endpoints) {
    phase_ = Phase::kConnecting;
    asio::async_connect(
        socket(), endpoints,
        [self = shared_from_this()](const asio::error_code& ec, const tcp::endpoint&) {
          self->on_connected(ec);
        });
  }

  void start_accepted() { on_connected({}); }

  void enqueue(OutFrame f) {
    if (phase_ == Phase::kClosed) {
      if (f.op) f.op->finish(unavailable("link closed"));
      return;
    }
    outq_.push_back(std::move(f));
    if (!writing_) write_next();
  }

  // Removes `op`'s frames that are not being written; true when one is being written.
  bool purge(const std::shared_ptr<SendOp>& op) {
    const std::size_t keep = writing_ ? 1 : 0;
    std::deque<OutFrame> rest;
    for (std::size_t i = 0; i < outq_.size(); ++i) {
      if (i < keep || outq_[i].op != op) rest.push_back(std::move(outq_[i]));
    }
    outq_.swap(rest);
    return op->writing > 0;
  }

  // The send operations of `state` that still have frames queued here.
  std::vector<std::shared_ptr<SendOp>> ops_of(const std::shared_ptr<ExchangeState>& state) const {
    std::vector<std::shared_ptr<SendOp>> ops;
    for (const OutFrame& f : outq_) {
      if (f.op && f.op->ex == state && !f.op->resolved &&
          std::find(ops.begin(), ops.end(), f.op) == ops.end()) {
        ops.push_back(f.op);
      }
    }
    return ops;
  }

  void goodbye(const std::string& reason) {
    if (phase_ != Phase::kEstablished) {
      close(unavailable("shutting down"));
      return;
    }
    pb::Goodbye g;
    g.set_reason(reason);
    enqueue({std::make_shared<const std::string>(encode_frame(FrameType::kGoodbye, g)), {}, {}});
    close_after_flush_ = true;
  }

  void resume() {
    if (!paused_ || phase_ != Phase::kEstablished) return;
    paused_ = false;
    last_rx_ms_ = now_ms();
    dispatch_params();
  }

  void on_tick(std::int64_t now) {
    if (phase_ == Phase::kClosed) return;
    if (phase_ != Phase::kEstablished) {
      if (now > deadline_ms_) {
        reject(deadline_exceeded("handshake did not finish within " +
                                 std::to_string(t_.options().handshake_timeout_ms) + " ms"));
      }
      return;
    }
    if (!paused_ && now - last_rx_ms_ > t_.options().peer_timeout_ms) {
      t_.count(&TransportStats::links_timed_out);
      GOSSIP_LOG(kWarning) << "net: " << describe() << " silent for " << (now - last_rx_ms_)
                           << " ms; dropping the link";
      close(deadline_exceeded(describe() + " sent nothing for " +
                              std::to_string(now - last_rx_ms_) + " ms"));
      return;
    }
    if (outq_.empty() && !close_after_flush_ &&
        now - last_tx_ms_ >= t_.options().heartbeat_interval_ms) {
      pb::Heartbeat hb;
      hb.set_sender(static_cast<std::uint32_t>(t_.options().self.node_id));
      hb.set_iteration(t_.local_iteration());
      enqueue(
          {std::make_shared<const std::string>(encode_frame(FrameType::kHeartbeat, hb)), {}, {}});
    }
  }

  void close(const Status& why) {
    if (phase_ == Phase::kClosed) return;
    const bool was_established = phase_ == Phase::kEstablished;
    phase_ = Phase::kClosed;
    asio::error_code ignored;
    socket().shutdown(tcp::socket::shutdown_both, ignored);
    socket().close(ignored);
    // Every queued send fails now. Once the socket is closed on this (the io) thread no syscall
    // touches the caller's buffers again, so the frame in flight fails too; its handler only pops
    // it from the queue.
    const std::size_t keep = writing_ ? 1 : 0;
    const Status lost = unavailable("link to " + describe() + " closed: " + why.message());
    if (keep == 1 && outq_.front().op) outq_.front().op->finish(lost);
    while (outq_.size() > keep) {
      OutFrame f = std::move(outq_.back());
      outq_.pop_back();
      if (f.op) f.op->finish(lost);
    }
    if (was_established) {
      GOSSIP_LOG(kInfo) << "net: link to " << describe() << " closed: " << why.message();
    }
    t_.on_session_closed(shared_from_this(), why);
  }

 private:
  // The stream that frames are read from: after the TLS handshake the session's records are
  // opened by TlsRecordReader (net/tls.h), asio::ssl::stream only made the handshake.
  template <typename F>
  void with_stream(F&& f) {
    if (tls_) {
      f(*tls_reader_);
    } else {
      f(*plain_);
    }
  }

  void reject(const Status& why) {
    if (phase_ == Phase::kClosed) return;
    t_.count(&TransportStats::handshakes_rejected);
    // check_peer_hello: InvalidArgument is a configuration mismatch (job, algorithm, topology,
    // model), which no retry can fix.
    if (why.code() == StatusCode::kInvalidArgument) t_.note_config_mismatch(why);
    GOSSIP_LOG(kWarning) << "net: node " << t_.options().self.node_id << " rejected "
                         << (dialer_ ? "link to " : "connection from ") << describe() << ": "
                         << why.to_string();
    close(why);
  }

  void bad_frame(const Status& why) {
    if (phase_ == Phase::kClosed) return;
    t_.count(&TransportStats::bad_frames);
    GOSSIP_LOG(kWarning) << "net: bad frame from " << describe() << ": " << why.to_string()
                         << "; closing the link";
    close(why);
  }

  void on_connected(const asio::error_code& ec) {
    if (phase_ == Phase::kClosed) return;
    if (ec) {
      close(unavailable("cannot connect to " + describe() + ": " + ec.message()));
      return;
    }
    deadline_ms_ = now_ms() + t_.options().handshake_timeout_ms;
    asio::error_code ignored;
    socket().set_option(tcp::no_delay(true), ignored);
    const auto ep = socket().remote_endpoint(ignored);
    if (remote_.empty() || !dialer_)
      remote_ = ep.address().to_string() + ":" + std::to_string(ep.port());
    if (tls_) {
      phase_ = Phase::kTls;
      tls_->async_handshake(
          dialer_ ? asio::ssl::stream_base::client : asio::ssl::stream_base::server,
          [self = shared_from_this()](const asio::error_code& e) { self->on_tls(e); });
      return;
    }
    start_hello();
  }

  void on_tls(const asio::error_code& ec) {
    if (phase_ == Phase::kClosed) return;
    if (ec) {
      reject(permission_denied("TLS handshake failed: " + ec.message()));
      return;
    }
    if (Status s = direct_records(*tls_); !s.is_ok()) {
      close(s);
      return;
    }
    tls_reader_ = std::make_unique<TlsRecordReader>(*tls_);
    Result<CertIdentity> id = cert_identity(SSL_get0_peer_certificate(tls_->native_handle()));
    if (!id.is_ok()) {
      reject(id.status());
      return;
    }
    if (id->job_id != t_.options().self.job_id) {
      reject(permission_denied("certificate is for job '" + id->job_id.substr(0, 64) +
                               "', ours is '" + t_.options().self.job_id + "'"));
      return;
    }
    if (dialer_) {
      if (id->node_id != peer_) {
        reject(permission_denied("certificate names node " + std::to_string(id->node_id) +
                                 ", expected neighbour " + std::to_string(peer_)));
        return;
      }
    } else {
      Status s = check_acceptable(id->node_id);
      if (!s.is_ok()) {
        reject(s);
        return;
      }
      peer_ = id->node_id;
    }
    cert_peer_ = id->node_id;
    start_hello();
  }

  // The acceptor side's rule: a neighbour with a lower id than ours (it dials us).
  Status check_acceptable(int id) const {
    if (!t_.is_neighbour(id)) {
      return permission_denied(node_name(id) + " is not a neighbour of node " +
                               std::to_string(t_.options().self.node_id));
    }
    if (id > t_.options().self.node_id) {
      return permission_denied(node_name(id) + " dialed us, but the lower id dials");
    }
    return Status::ok();
  }
  void start_hello() {
    phase_ = Phase::kHello;
    if (dialer_) {
      enqueue(
          {std::make_shared<const std::string>(encode_frame(FrameType::kHello, t_.local_hello())),
           {},
           {}});
    }
    read_header();
  }

  void read_header() {
    with_stream([this](auto& s) {
      asio::async_read(s, asio::buffer(hdr_),
                       [self = shared_from_this()](const asio::error_code& ec, std::size_t) {
                         self->on_header(ec);
                       });
    });
  }

  void on_read_error(const asio::error_code& ec) {
    if (phase_ != Phase::kEstablished) {
      reject(unavailable("connection closed during the handshake: " + ec.message()));
    } else if (ec == asio::error::eof || ec == asio::ssl::error::stream_truncated) {
      close(unavailable(describe() + " closed the connection"));
    } else {
      close(unavailable("reading from " + describe() + ": " + ec.message()));
    }
  }

  void on_header(const asio::error_code& ec) {
    if (phase_ == Phase::kClosed) return;
    if (ec) {
      on_read_error(ec);
      return;
    }
    last_rx_ms_ = now_ms();
    const FrameLimits limits =
        phase_ == Phase::kEstablished ? session_limits(t_.model_bytes()) : handshake_limits();
    Result<FrameHeader> h = decode_frame_header(hdr_, limits);
    if (!h.is_ok()) {
      if (phase_ == Phase::kEstablished) {
        bad_frame(h.status());
      } else {
        reject(h.status());
      }
      return;
    }
    header_ = *h;
    msg_.resize(header_.header_len);
    if (msg_.empty()) {
      on_message({});
      return;
    }
    with_stream([this](auto& s) {
      asio::async_read(s, asio::buffer(msg_),
                       [self = shared_from_this()](const asio::error_code& e, std::size_t) {
                         self->on_message(e);
                       });
    });
  }

  void on_message(const asio::error_code& ec) {
    if (phase_ == Phase::kClosed) return;
    if (ec) {
      on_read_error(ec);
      return;
    }
    last_rx_ms_ = now_ms();
    switch (header_.type) {
      case FrameType::kHello:
        on_hello();
        return;
      case FrameType::kHelloAck:
        on_hello_ack();
        return;
      case FrameType::kParams: {
        params_.Clear();
        Status s = parse_message(msg_, &params_);
        if (s.is_ok()) s = validate_params(params_, header_.payload_len, t_.model_bytes());
        if (s.is_ok() && params_.sender() != static_cast<std::uint32_t>(peer_)) {
          s = corruption("Params from node " + std::to_string(params_.sender()) +
                         " on the link to " + node_name(peer_));
        }
        if (!s.is_ok()) {
          bad_frame(s);
          return;
        }
        if (params_.chunk_index() == 0) t_.note_peer_iteration(peer_, params_.iteration());
        dispatch_params();
        return;
      }
      case FrameType::kHeartbeat: {
        pb::Heartbeat hb;
        Status s = parse_message(msg_, &hb);
        if (s.is_ok() && hb.sender() != static_cast<std::uint32_t>(peer_)) {
          s = corruption("Heartbeat from node " + std::to_string(hb.sender()) + " on the link to " +
                         node_name(peer_));
        }
        if (!s.is_ok()) {
          bad_frame(s);
          return;
        }
        t_.on_heartbeat(peer_, hb);
        if (phase_ == Phase::kEstablished) read_header();
        return;
      }
      case FrameType::kGoodbye: {
        pb::Goodbye g;
        Status s = parse_message(msg_, &g);
        peer_said_goodbye_ = true;
        close(unavailable(describe() + " said goodbye" +
                          (s.is_ok() ? ": " + g.reason().substr(0, 200) : std::string())));
        return;
      }
    }
  }

  void on_hello() {
    if (dialer_) {
      reject(corruption("unexpected Hello from the node we dialed"));
      return;
    }
    pb::Hello hello;
    Status s = parse_message(msg_, &hello);
    if (!s.is_ok()) {
      reject(s);
      return;
    }
    int expected = cert_peer_;
    if (!tls_) {  // --insecure: the Hello is the only identity there is
      expected = static_cast<int>(std::min<std::uint32_t>(hello.node_id(), 1u << 30));
      s = check_acceptable(expected);
      if (!s.is_ok()) {
        refuse(s);
        return;
      }
      peer_ = expected;
    }
    s = check_peer_hello(hello, t_.options().self, expected);
    if (!s.is_ok()) {
      refuse(s);
      return;
    }
    pb::HelloAck ack;
    *ack.mutable_hello() = t_.local_hello();
    ack.set_accepted(true);
    enqueue({std::make_shared<const std::string>(encode_frame(FrameType::kHelloAck, ack)), {}, {}});
    become_established(hello);
  }

  // Tells the dialer why (so both logs say which field differed), then closes.
  void refuse(const Status& why) {
    t_.count(&TransportStats::handshakes_rejected);
    // check_peer_hello: InvalidArgument is a configuration mismatch (job, algorithm, topology,
    // model), which no retry can fix.
    if (why.code() == StatusCode::kInvalidArgument) t_.note_config_mismatch(why);
    GOSSIP_LOG(kWarning) << "net: node " << t_.options().self.node_id
                         << " rejected connection from " << describe() << ": " << why.to_string();
    pb::HelloAck ack;
    *ack.mutable_hello() = t_.local_hello();
    ack.set_accepted(false);
    ack.set_reason(why.message());
    enqueue({std::make_shared<const std::string>(encode_frame(FrameType::kHelloAck, ack)), {}, {}});
    close_after_flush_ = true;
    refused_ = why;
  }

  void on_hello_ack() {
    if (!dialer_) {
      reject(corruption("unexpected HelloAck from a node that dialed us"));
      return;
    }
    pb::HelloAck ack;
    Status s = parse_message(msg_, &ack);
    if (!s.is_ok()) {
      reject(s);
      return;
    }
    if (!ack.accepted()) {
      // When its own Hello (sent with the refusal) shows a configuration mismatch, that is the
      // reason, seen from our side: recorded like one we refused (config_mismatch()).
      Status mismatch = check_peer_hello(ack.hello(), t_.options().self, peer_);
      reject(mismatch.code() == StatusCode::kInvalidArgument
                 ? invalid_argument(describe() + " refused our Hello: " + mismatch.message())
                 : permission_denied(describe() +
                                     " refused our Hello: " + ack.reason().substr(0, 300)));
      return;
    }
    s = check_peer_hello(ack.hello(), t_.options().self, peer_);
    if (!s.is_ok()) {
      reject(s);
      return;
    }
    become_established(ack.hello());
  }

  void become_established(const pb::Hello& hello) {
    phase_ = Phase::kEstablished;
    last_rx_ms_ = now_ms();
    t_.on_established(shared_from_this(), peer_, hello);
    if (phase_ == Phase::kEstablished) read_header();
  }

  void dispatch_params() {
    if (Status s = check_params_checksum_mode(params_, tls_ != nullptr); !s.is_ok()) {
      bad_frame(s);
      return;
    }
    Peer& p = t_.peer(peer_);
    Transport::Impl::Target target = t_.classify(p, params_);
    switch (target.kind) {
      case Transport::Impl::Target::kBad:
        bad_frame(target.status);
        return;
      case Transport::Impl::Target::kPause:
        paused_ = true;
        return;
      case Transport::Impl::Target::kDiscard:
        t_.count(&TransportStats::stale_frames);
        discard_left_ = header_.payload_len;
        discard();
        return;
      case Transport::Impl::Target::kInto:
        break;
    }
    target_ = std::move(target.slot);
    target_->reading = true;
    if (target_->ex) target_->ex->busy(+1);
    payload_done_ = 0;
    payload_crc_ = 0;
    read_payload_piece();
  }

  // The payload is read in pieces of at most kPayloadPiece bytes and each piece is checksummed
  // (unless the sender omitted the checksum on this TLS link) right after it lands, while it is
  // still in cache: a second pass over a multi-MiB chunk from memory would cost about as much as
  // the copy out of the socket.
  static constexpr std::size_t kPayloadPiece = 512 * 1024;
  void read_payload_piece() {
    auto* dst = reinterpret_cast<std::uint8_t*>(target_->buffer.data()) + params_.byte_offset() +
                payload_done_;
    const std::size_t n =
        std::min<std::uint64_t>(header_.payload_len - payload_done_, kPayloadPiece);
    if (tls_) {
      read_tls_piece(dst, n, 0);
      return;
    }
    with_stream([&](auto& s) {
      asio::async_read(
          s, asio::buffer(dst, n), TransferRest{n},
          [self = shared_from_this(), dst, n](const asio::error_code& ec, std::size_t) {
            if (ec) {
              self->on_payload(ec);
            } else {
              self->payload_piece_done(dst, n);
            }
          });
    });
  }

  // TLS: decrypts every record already received with synchronous, non-blocking read_some calls
  // (one SSL_read each, no trip through the io_context), and waits for more with one
  // async_read_some when there is none. `got` bytes of the piece [dst, dst + n) are in.
  void read_tls_piece(std::uint8_t* dst, std::size_t n, std::size_t got) {
    asio::error_code ec;
    while (got < n) {
      got += tls_reader_->read_some(asio::buffer(dst + got, n - got), ec);
      if (ec) break;
    }
    if (got == n) {
      payload_piece_done(dst, n);
      return;
    }
    if (ec != asio::error::would_block) {
      on_payload(ec);
      return;
    }
    tls_reader_->async_read_some(
        asio::buffer(dst + got, n - got),
        [self = shared_from_this(), dst, n, got](const asio::error_code& e, std::size_t k) {
          if (e || self->phase_ == Phase::kClosed || self->target_->resolved) {
            self->on_payload(e);
            return;
          }
          self->last_rx_ms_ = now_ms();
          self->read_tls_piece(dst, n, got + k);
        });
  }

  // The piece [dst, dst + n) of the payload is in: checksum it, then read the next or finish.
  void payload_piece_done(std::uint8_t* dst, std::size_t n) {
    if (phase_ != Phase::kClosed && !target_->resolved) {
      if (!params_.crc32c_omitted()) payload_crc_ = crc32c(dst, n, payload_crc_);
      payload_done_ += n;
      if (payload_done_ < header_.payload_len) {
        last_rx_ms_ = now_ms();
        read_payload_piece();
        return;
      }
    }
    on_payload({});
  }

  void discard() {
    if (discard_left_ == 0) {
      read_header();
      return;
    }
    scratch_.resize(64 * 1024);
    const std::size_t n = std::min<std::uint64_t>(discard_left_, scratch_.size());
    with_stream([&](auto& s) {
      asio::async_read(s, asio::buffer(scratch_.data(), n),
                       [self = shared_from_this(), n](const asio::error_code& ec, std::size_t) {
                         if (self->phase_ == Phase::kClosed) return;
                         if (ec) {
                           self->on_read_error(ec);
                           return;
                         }
                         self->last_rx_ms_ = now_ms();
                         self->discard_left_ -= n;
                         self->discard();
                       });
    });
  }

  void on_payload(const asio::error_code& ec) {
    std::shared_ptr<RecvSlot> slot = std::move(target_);
    slot->reading = false;
    const std::uint64_t len = header_.payload_len;
    // Without a checksum (TLS only, see dispatch_params) the AES-GCM tags vouched for each byte.
    const bool crc_ok =
        payload_done_ == len && (params_.crc32c_omitted() || payload_crc_ == params_.crc32c());
    if (slot->ex) slot->ex->busy(-1);  // after the checksum: it reads the caller's buffer
    if (phase_ == Phase::kClosed) return;
    if (ec) {
      on_read_error(ec);
      return;
    }
    last_rx_ms_ = now_ms();
    if (slot->resolved) {  // abandoned meanwhile (the link is reset in that case; be safe)
      read_header();
      return;
    }
    if (!crc_ok) {
      bad_frame(corruption("payload checksum mismatch in chunk " +
                           std::to_string(params_.chunk_index()) + " of iteration " +
                           std::to_string(params_.iteration())));
      return;
    }
    if (params_.crc32c_omitted()) t_.count(&TransportStats::unchecksummed_chunks);
    t_.chunk_received(t_.peer(peer_), slot, params_, len);
    if (phase_ == Phase::kEstablished) read_header();
  }

  void write_next() {
    if (outq_.empty() || phase_ == Phase::kClosed) {
      writing_ = false;
      if (close_after_flush_ && phase_ == Phase::kEstablished) {
        // Goodbye is out: half-close and let the read loop run until the peer closes too.
        // Closing at once could reset the connection (RST when its heartbeats are still unread),
        // and a reset makes the peer's kernel drop our Goodbye before the peer reads it.
        asio::error_code ignored;
        socket().shutdown(tcp::socket::shutdown_send, ignored);
      } else if (close_after_flush_ && phase_ != Phase::kClosed) {
        close(refused_.is_ok() ? unavailable("we said goodbye") : refused_);
      }
      return;
    }
    writing_ = true;
    OutFrame& f = outq_.front();
    if (f.op) {
      f.op->writing++;
      if (f.op->ex) f.op->ex->busy(+1);
    }
    if (tls_) {
      write_tls_from(0);
      return;
    }
    std::array<asio::const_buffer, 2> bufs{asio::buffer(*f.head), f.payload};
    asio::async_write(*plain_, bufs, TransferRest{asio::buffer_size(bufs)},
                      [self = shared_from_this()](const asio::error_code& ec, std::size_t) {
                        self->on_write(ec);
                      });
  }

  // TLS: encrypts the frame record by record straight into the CoalescingStream's write-behind
  // buffer (net::write_record: one SSL_write each, no trip through the io_context) while it has
  // room for a whole record; when it has none, waits until the kernel has taken enough
  // (CoalescingStream::room_target) and goes on. The frame is written when its last
  // record is in the kernel: whoever then half-closes after a Goodbye loses nothing. `done`
  // bytes of head + payload are written.
  static constexpr std::size_t kRecordPlaintext = 16384;  // TLS 1.3 maximum
  void write_tls_from(std::size_t done) {
    const OutFrame& f = outq_.front();
    const std::size_t head = f.head->size();
    const std::size_t total = head + f.payload.size();
    // The next record's plaintext: from the header or from the payload, never both.
    auto piece = [&](std::size_t at) {
      if (at < head)
        return asio::buffer(f.head->data() + at, std::min(head - at, kRecordPlaintext));
      const auto* p = static_cast<const std::uint8_t*>(f.payload.data()) + (at - head);
      return asio::buffer(p, std::min(total - at, kRecordPlaintext));
    };
    CoalescingStream& out = tls_->next_layer();
    asio::error_code ec;
    while (done < total && out.write_room() >= CoalescingStream::kFullRecord) {
      done += write_record(*tls_, piece(done), ec);
      if (ec) {
        on_write(ec);
        return;
      }
    }
    const bool last = done == total;
    // Last record: wait for everything; otherwise for room for the next record.
    const std::uint64_t target = last ? out.accepted() : out.room_target();
    out.async_wait_sent(target, [self = shared_from_this(), done, last](const asio::error_code& e) {
      if (e || last || self->phase_ == Phase::kClosed) {
        self->on_write(e || self->phase_ != Phase::kClosed ? e : asio::error::operation_aborted);
        return;
      }
      self->write_tls_from(done);
    });
  }

  void on_write(const asio::error_code& ec) {
    OutFrame f = std::move(outq_.front());
    outq_.pop_front();
    writing_ = false;
    if (f.op) {
      f.op->writing--;
      if (f.op->ex) f.op->ex->busy(-1);
    }
    if (ec) {
      if (f.op) f.op->finish(unavailable("write failed: " + ec.message()));
      close(unavailable("writing to " + describe() + ": " + ec.message()));
      return;
    }
    last_tx_ms_ = now_ms();
    if (f.op) {
      t_.count(&TransportStats::bytes_sent, f.payload.size());
      if (--f.op->chunks_left == 0) f.op->finish(Status::ok());
    }
    write_next();
  }

  Transport::Impl& t_;
  const bool dialer_;
  int peer_ = -1;       // the neighbour's id once known (dialer: from the start)
  int cert_peer_ = -1;  // the id the TLS certificate names
  std::string remote_;
  Phase phase_ = Phase::kConnecting;
  std::unique_ptr<SslStream> tls_;
  std::unique_ptr<TlsRecordReader> tls_reader_;  // after the handshake (direct_records)
  std::unique_ptr<tcp::socket> plain_;
  std::int64_t deadline_ms_ = 0;  // for the handshake
  std::int64_t last_rx_ms_ = 0;
  std::int64_t last_tx_ms_ = 0;

  FrameHeaderBytes hdr_{};
  FrameHeader header_;
  std::vector<std::uint8_t> msg_;
  pb::Params params_;
  std::shared_ptr<RecvSlot> target_;
  bool paused_ = false;
  bool peer_said_goodbye_ = false;  // the link ended with the peer's Goodbye
  std::uint64_t discard_left_ = 0;
  std::vector<std::uint8_t> scratch_;
  std::uint64_t payload_done_ = 0;  // bytes of the current payload read and checksummed
  std::uint32_t payload_crc_ = 0;

  std::deque<OutFrame> outq_;
  bool writing_ = false;
  bool close_after_flush_ = false;
  Status refused_;

 public:
  void set_remote(std::string r) { remote_ = std::move(r); }
};

// ------------------------------------------------------------------------------------------------
// Impl

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

bool Transport::Impl::checksums_needed(std::span<const int> to) const {
  if (!ssl_) return true;
  for (int peer : to) {
    auto h = hellos_.find(peer);
    if (h == hellos_.end() || !h->second.payload_crc_optional()) return true;
  }
  return false;
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
    }
    // A peer that says Goodbye has sent everything of the iterations it finished (its data
    // precedes the Goodbye): a whole iteration already staged stays for the receive to come.
    fail_peer(p, unavailable("link to " + node_name(id) + " lost: " + why.message()),
              s->peer_said_goodbye());
    if (p.we_dial) schedule_redial(p);
  } else if (p.pending == s) {
    p.pending.reset();
    schedule_redial(p);
  }
}

void Transport::Impl::fail_peer(Peer& p, const Status& s, bool keep_complete_staging) {
  auto recvs = std::move(p.recvs);
  p.recvs.clear();
  for (auto& [iteration, slot] : recvs) {
    slot->resolved = true;
    slot->ex->resolve(true, p.addr.node_id, s);
    p.floor = std::max(p.floor, iteration + 1);
  }
  const bool keep = keep_complete_staging && p.staging && p.staging->complete() &&
                    !p.staging->reading && p.staging->iteration >= p.floor;
  if (!keep) p.staging.reset();
}

std::uint32_t Transport::Impl::chunk_count(std::uint64_t num_bytes) const {
  return static_cast<std::uint32_t>((num_bytes + opts_.chunk_bytes - 1) / opts_.chunk_bytes);
}

Transport::Impl::Frame Transport::Impl::make_frame(std::uint64_t iteration,
                                                   std::span<const float> data, std::uint32_t index,
                                                   bool checksum) const {
  const std::uint64_t total = data.size_bytes();
  const std::uint64_t chunk = opts_.chunk_bytes;
  const std::uint64_t off = index * chunk;
  const std::uint64_t len = std::min(chunk, total - off);
  const auto* base = reinterpret_cast<const std::uint8_t*>(data.data());
  pb::Params params;
  params.set_sender(static_cast<std::uint32_t>(opts_.self.node_id));
  params.set_iteration(iteration);
  params.set_chunk_index(index);
  params.set_chunk_count(chunk_count(total));
  params.set_byte_offset(off);
  if (checksum) {
    params.set_crc32c(crc32c(base + off, len));
  } else {
    params.set_crc32c_omitted(true);
  }
  return {std::make_shared<const std::string>(encode_frame(FrameType::kParams, params, len)),
          asio::const_buffer(base + off, len)};
}

void Transport::Impl::post_frame(const std::shared_ptr<SendOp>& op, const Frame& frame) {
  if (op->resolved) return;  // abandoned or failed already
  Peer& p = peers_.at(op->peer);
  OutFrame f{frame.first, frame.second, op};
  if (p.session) {
    p.session->enqueue(std::move(f));
  } else {
    p.waiting.push_back(std::move(f));
  }
}

void Transport::Impl::post_recv(const std::shared_ptr<RecvSlot>& slot) {
  Peer& p = peers_.at(slot->peer);
  if (slot->iteration < p.floor) {
    slot->resolved = true;
    slot->ex->resolve(
        true, slot->peer,
        failed_precondition("receive from " + node_name(slot->peer) + " posted for iteration " +
                            std::to_string(slot->iteration) + ", which is already finished"));
    return;
  }
  GOSSIP_CHECK(p.recvs.count(slot->iteration) == 0)
      << "two receives from node " << slot->peer << " for iteration " << slot->iteration;
  p.recvs[slot->iteration] = slot;
  if (p.staging && p.staging->iteration == slot->iteration && !p.staging->reading) {
    drain_staging(p, slot);
  }
  resume_reader(p);
}

void Transport::Impl::drain_staging(Peer& p, std::shared_ptr<RecvSlot> slot) {
  std::shared_ptr<RecvSlot> st = std::move(p.staging);
  p.staging.reset();
  for (const auto& [off, cnt] : st->chunks) {
    std::copy_n(st->buffer.data() + off, cnt, slot->buffer.data() + off);
    slot->ex->add_event({p.addr.node_id, slot->iteration, off, cnt});
  }
  slot->chunk_count = st->chunk_count;
  slot->next_chunk = st->next_chunk;
  slot->next_offset = st->next_offset;
  if (slot->complete()) complete_recv(p, slot);
}

// Slots are taken by value: callers may pass a reference to the map entry that erase() destroys.
void Transport::Impl::complete_recv(Peer& p, std::shared_ptr<RecvSlot> slot) {
  slot->resolved = true;
  p.recvs.erase(slot->iteration);
  slot->ex->resolve(true, p.addr.node_id, Status::ok());
  advance_floor(p, slot->iteration + 1);
}

void Transport::Impl::fail_recv(Peer& p, std::shared_ptr<RecvSlot> slot, const Status& s) {
  slot->resolved = true;
  p.recvs.erase(slot->iteration);
  slot->ex->resolve(true, p.addr.node_id, s);
  advance_floor(p, slot->iteration + 1);
}

void Transport::Impl::advance_floor(Peer& p, std::uint64_t floor) {
  p.floor = std::max(p.floor, floor);
  if (p.staging && p.staging->iteration < p.floor && !p.staging->reading) p.staging.reset();
  resume_reader(p);
}

void Transport::Impl::resume_reader(Peer& p) {
  if (p.session && p.session->paused()) {
    // Resume from a fresh handler: we may be inside the session's own call stack.
    asio::post(io_, [s = p.session] { s->resume(); });
  }
}

Transport::Impl::Target Transport::Impl::classify(Peer& p, const pb::Params& params) {
  const std::uint64_t it = params.iteration();
  if (it < p.floor) return {Target::kDiscard, nullptr, {}};
  std::shared_ptr<RecvSlot> slot;
  if (auto r = p.recvs.find(it); r != p.recvs.end()) {
    slot = r->second;
    if (p.staging && p.staging->iteration == it && !p.staging->reading) drain_staging(p, slot);
    if (slot->resolved) return {Target::kDiscard, nullptr, {}};
  } else if (p.staging && p.staging->iteration == it) {
    slot = p.staging;
  } else if (!p.staging && it <= p.floor + 1) {
    // One iteration ahead: buffer it (allocation bounded by the agreed model size).
    slot = std::make_shared<RecvSlot>();
    slot->peer = p.addr.node_id;
    slot->iteration = it;
    if (!p.staging_memory) p.staging_memory = staging_buffer(opts_.self.param_count);
    slot->buffer = {p.staging_memory.get(), opts_.self.param_count};
    p.staging = slot;
  } else {
    return {Target::kPause, nullptr, {}};
  }
  if (slot->complete() || params.chunk_index() != slot->next_chunk ||
      params.byte_offset() != slot->next_offset ||
      (slot->next_chunk > 0 && params.chunk_count() != slot->chunk_count)) {
    return {Target::kBad, nullptr,
            corruption("out-of-order Params for iteration " + std::to_string(it) + ": chunk " +
                       std::to_string(params.chunk_index()) + "/" +
                       std::to_string(params.chunk_count()) + " at byte " +
                       std::to_string(params.byte_offset()) + ", expected chunk " +
                       std::to_string(slot->next_chunk) + " at byte " +
                       std::to_string(slot->next_offset))};
  }
  slot->chunk_count = params.chunk_count();
  return {Target::kInto, slot, {}};
}

void Transport::Impl::chunk_received(Peer& p, const std::shared_ptr<RecvSlot>& slot,
                                     const pb::Params& params, std::uint64_t len) {
  count(&TransportStats::bytes_received, len);
  slot->next_chunk++;
  slot->next_offset += len;
  const std::size_t off = params.byte_offset() / sizeof(float);
  const std::size_t cnt = len / sizeof(float);
  if (!slot->ex) {                  // staging
    if (p.staging != slot) return;  // dropped meanwhile
    slot->chunks.emplace_back(off, cnt);
    if (slot->iteration < p.floor) {
      p.staging.reset();
    } else if (auto r = p.recvs.find(slot->iteration); r != p.recvs.end()) {
      drain_staging(p, r->second);
    }
    return;
  }
  slot->ex->add_event({p.addr.node_id, slot->iteration, off, cnt});
  if (slot->complete()) complete_recv(p, slot);
}

void Transport::Impl::abandon(const std::shared_ptr<ExchangeState>& state) {
  // Runs on the io thread; finds this exchange's unresolved operations through the peers.
  for (auto& [id, p] : peers_) {
    std::vector<std::shared_ptr<RecvSlot>> slots;
    for (auto& [iteration, slot] : p.recvs) {
      if (slot->ex == state && !slot->resolved) slots.push_back(slot);
    }
    bool reset = false;
    for (auto& slot : slots) {
      reset = reset || slot->reading;
      fail_recv(p, slot,
                deadline_exceeded("no complete iteration-" + std::to_string(slot->iteration) +
                                  " buffer from " + node_name(id) + " before the deadline (" +
                                  std::to_string(slot->next_chunk) + "/" +
                                  std::to_string(slot->chunk_count) + " chunks arrived)"));
    }
    std::vector<std::shared_ptr<SendOp>> ops;
    for (auto& f : p.waiting) {
      if (f.op && f.op->ex == state && std::find(ops.begin(), ops.end(), f.op) == ops.end()) {
        ops.push_back(f.op);
      }
    }
    std::erase_if(p.waiting, [&](const OutFrame& f) { return f.op && f.op->ex == state; });
    for (auto& op : ops) {
      op->finish(deadline_exceeded(node_name(id) + " was not connected before the deadline"));
    }
    if (p.session) {
      for (auto& op : p.session->ops_of(state)) {
        reset = p.session->purge(op) || reset;
        op->finish(deadline_exceeded(node_name(id) + " did not take the whole buffer before "
                                                     "the deadline"));
      }
    }
    if (reset && p.session) {
      p.session->close(deadline_exceeded("deadline passed mid-chunk; link reset"));
    }
  }
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

// ---- caller-facing

std::shared_ptr<Exchange> Transport::Impl::exchange(std::uint64_t iteration,
                                                    std::span<const float> data,
                                                    std::span<const int> to,
                                                    std::span<const RecvSpec> recvs) {
  auto state = std::make_shared<ExchangeState>();
  state->transport = weak_from_this();
  state->iteration = iteration;
  state->unresolved_sends = static_cast<int>(to.size());
  state->unresolved_recvs = static_cast<int>(recvs.size());
  if (!to.empty()) GOSSIP_CHECK_EQ(data.size(), opts_.self.param_count);
  std::vector<std::shared_ptr<SendOp>> ops;
  for (int peer : to) {
    GOSSIP_CHECK(peers_.count(peer)) << "send to " << peer << ", which is not a neighbour";
    auto op = std::make_shared<SendOp>();
    op->peer = peer;
    op->iteration = iteration;
    op->ex = state;
    ops.push_back(std::move(op));
  }
  std::vector<std::shared_ptr<RecvSlot>> slots;
  for (const RecvSpec& r : recvs) {
    GOSSIP_CHECK(peers_.count(r.peer)) << "receive from " << r.peer << ", not a neighbour";
    GOSSIP_CHECK_EQ(r.buffer.size(), opts_.self.param_count);
    auto slot = std::make_shared<RecvSlot>();
    slot->peer = r.peer;
    slot->iteration = iteration;
    slot->buffer = r.buffer;
    slot->ex = state;
    slots.push_back(std::move(slot));
  }
  // Checksums are computed here, on the caller's thread, once for all destinations, and each
  // chunk is handed to the io thread as soon as its checksum is known, so that sending starts
  // while later chunks are still being checksummed. On TLS links to peers that accept it, there
  // is no checksum (AES-GCM authenticates every byte): see checksums_needed().
  const std::uint32_t num_chunks = to.empty() ? 0 : chunk_count(data.size_bytes());
  {
    std::lock_guard l(mu_);
    if (!shut_down_) {
      asio::post(io_, [this, state, ops, slots = std::move(slots), num_chunks] {
        if (stopping_) {
          for (auto& op : ops) op->finish(unavailable("transport shut down"));
          for (auto& s : slots) state->resolve(true, s->peer, unavailable("transport shut down"));
          return;
        }
        live_exchanges_.push_back(state);
        for (auto& op : ops) op->chunks_left = num_chunks;
        for (auto& s : slots) post_recv(s);
      });
      const bool checksum = checksums_needed(to);
      for (std::uint32_t c = 0; c < num_chunks; ++c) {
        auto frame = make_frame(iteration, data, c, checksum);
        asio::post(io_, [this, ops, frame = std::move(frame)] {
          if (stopping_) return;
          for (auto& op : ops) post_frame(op, frame);
        });
      }
      return std::make_shared<Exchange>(state);
    }
  }
  for (auto& op : ops) op->finish(unavailable("transport shut down"));
  for (auto& s : slots) state->resolve(true, s->peer, unavailable("transport shut down"));
  return std::make_shared<Exchange>(state);
}

void Transport::Impl::send(int peer, std::uint64_t iteration, std::span<const float> data,
                           std::function<void(Status)> done) {
  GOSSIP_CHECK(peers_.count(peer)) << "send to " << peer << ", which is not a neighbour";
  GOSSIP_CHECK_EQ(data.size(), opts_.self.param_count);
  auto op = std::make_shared<SendOp>();
  op->peer = peer;
  op->iteration = iteration;
  op->done = std::move(done);
  const std::uint32_t num_chunks = chunk_count(data.size_bytes());
  std::lock_guard l(mu_);
  if (shut_down_) {
    op->finish(unavailable("transport shut down"));
    return;
  }
  asio::post(io_, [this, op, num_chunks] {
    if (stopping_) {
      op->finish(unavailable("transport shut down"));
      return;
    }
    op->chunks_left = num_chunks;
  });
  const bool checksum = checksums_needed(std::span<const int>(&peer, 1));
  for (std::uint32_t c = 0; c < num_chunks; ++c) {
    asio::post(io_, [this, op, frame = make_frame(iteration, data, c, checksum)] {
      if (!stopping_) post_frame(op, frame);
    });
  }
}

void Transport::Impl::post_abandon(std::shared_ptr<ExchangeState> state) {
  std::lock_guard l(mu_);
  if (shut_down_) return;  // shutdown resolves everything
  asio::post(io_, [this, state] { abandon(state); });
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

void Transport::Impl::on_heartbeat(int peer, const pb::Heartbeat& hb) {
  note_peer_iteration(peer, hb.iteration());
  if (hb.has_control() && opts_.on_control) opts_.on_control(peer, hb.control());
}

void Transport::Impl::send_control(int peer, const pb::Control& control) {
  GOSSIP_CHECK(peers_.count(peer)) << "control message to " << peer << ", not a neighbour";
  pb::Heartbeat hb;
  hb.set_sender(static_cast<std::uint32_t>(opts_.self.node_id));
  hb.set_iteration(local_iteration());
  *hb.mutable_control() = control;
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

TransportStats Transport::Impl::stats() const {
  std::lock_guard l(mu_);
  return stats_;
}

// ------------------------------------------------------------------------------------------------
// Exchange

Exchange::~Exchange() {
  if (state_) wait(SteadyClock::now());
}

std::optional<ChunkEvent> Exchange::next_chunk(Deadline deadline) {
  std::unique_lock l(state_->mu);
  state_->cv.wait_until(l, deadline,
                        [&] { return !state_->events.empty() || state_->unresolved_recvs == 0; });
  if (state_->events.empty()) return std::nullopt;
  ChunkEvent e = state_->events.front();
  state_->events.pop_front();
  return e;
}

ExchangeResult Exchange::wait(Deadline deadline) {
  std::unique_lock l(state_->mu);
  auto all_resolved = [&] {
    return state_->unresolved_recvs == 0 && state_->unresolved_sends == 0;
  };
  state_->cv.wait_until(l, deadline, all_resolved);
  if (!all_resolved() && !state_->abandon_posted) {
    state_->abandon_posted = true;
    if (auto t = state_->transport.lock()) {
      l.unlock();
      t->post_abandon(state_);
      l.lock();
    }
  }
  state_->cv.wait(l, [&] { return all_resolved() && state_->io_busy == 0; });
  return {state_->failures};
}

bool Exchange::sends_done() const {
  std::lock_guard l(state_->mu);
  return state_->unresolved_sends == 0;
}

std::uint64_t Exchange::iteration() const { return state_->iteration; }

// ------------------------------------------------------------------------------------------------
// Transport

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
std::optional<pb::Hello> Transport::peer_hello(int peer) const { return impl_->peer_hello(peer); }
void Transport::set_local_state(std::uint32_t degree, std::uint64_t iteration) {
  impl_->set_local_state(degree, iteration);
}
TransportStats Transport::stats() const { return impl_->stats(); }
std::optional<Status> Transport::config_mismatch() const { return impl_->config_mismatch(); }
void Transport::send_control(int peer, const pb::Control& control) {
  impl_->send_control(peer, control);
}
std::optional<std::uint64_t> Transport::peer_iteration(int peer) const {
  return impl_->peer_iteration(peer);
}
void Transport::skip_before(int peer, std::uint64_t iteration) {
  impl_->skip_before(peer, iteration);
}
void Transport::shutdown(std::int64_t flush_timeout_ms) { impl_->shutdown(flush_timeout_ms); }

}  // namespace gossip::net
