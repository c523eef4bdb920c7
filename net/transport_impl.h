// Transport internals shared by its source files (not installed API): the records of peers,
// posted receives and sends, the per-iteration exchange state, and Transport::Impl, which owns the
// io_context, the acceptor and one Peer per neighbour.
//
// The files of the transport, one job each:
//   transport.cc   Transport (the facade) and Impl's lifecycle: options, listening, dialing,
//                  link bookkeeping, shutdown, link state and control messages
//   session.cc     Session: one TCP (or TLS) connection — handshake, read loop, write queue
//   recv_slots.cc  where arriving Params go: posted receives, one-iteration-ahead staging,
//                  the per-peer floor of stale iterations
//   exchange.cc    the per-iteration exchange: chunked sends, posted receives, abandoning what
//                  misses its deadline; Exchange, the caller's handle
//
// Structure (after Asio's HTTP server example): a Session is a shared_from_this object with a read
// loop and a write queue. A Peer outlives its sessions: the receive slots, the one-iteration-ahead
// staging buffer and the frames waiting for a connection live there, so a reconnect does not lose
// what the caller posted.
//
// Everything here except ExchangeState's mutex-guarded fields and Impl's `mu_` fields is touched
// by the io thread only. Handlers never throw: every Asio call uses the error_code overloads.
#pragma once

// clang-format off: a standard header must come before Asio's (see net/tls.h).
#include <condition_variable>
#include <cstdlib>
#include <deque>
#include <map>
#include <mutex>
#include <set>
#include <thread>
// clang-format on
#include <asio.hpp>

#include "net/transport.h"

namespace gossip::net {

using tcp = asio::ip::tcp;
using SteadyClock = std::chrono::steady_clock;

inline std::int64_t now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             SteadyClock::now().time_since_epoch())
      .count();
}

inline std::string node_name(int id) { return "node " + std::to_string(id); }

// Asio's transfer_all caps every read_some/write_some at 64 KiB; for multi-MiB chunks that means
// 16x more syscalls than needed. This condition asks for everything that is left.
struct TransferRest {
  std::size_t operator()(const asio::error_code& ec, std::size_t transferred) const {
    return ec || transferred >= total ? 0 : total - transferred;
  }
  std::size_t total;
};

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

struct FreeDeleter {
  void operator()(float* p) const { std::free(p); }
};

// Memory for one iteration ahead of a neighbour (`floats` floats): see recv_slots.cc.
std::unique_ptr<float[], FreeDeleter> staging_buffer(std::size_t floats);

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
  // Why a link could not be made, each cause logged once (at most kMaxLoggedCauses of them): a
  // dial that fails every backoff period must not write a line per retry.
  std::set<std::string> logged_causes;
  static constexpr std::size_t kMaxLoggedCauses = 16;
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
  std::string describe_unconnected(std::span<const int> peers) const;
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
  void send_control(int peer, std::string control);
  void set_control_handler(ControlHandler handler);
  std::optional<std::uint64_t> peer_iteration(int peer) const;
  void skip_before(int peer, std::uint64_t iteration);
  void reset_floor(int peer, std::uint64_t floor);

  // ---- io thread
  std::uint64_t local_iteration() const {
    std::lock_guard l(mu_);
    return iteration_;
  }
  // Notes the peer's iteration and hands its control message (if any) to the handler, or holds
  // it; an error is the handler's verdict on the message (a bad frame).
  Status on_heartbeat(int peer, const pb::Heartbeat& hb);
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
  // Payload bytes to (`sent`) or from `peer`: the totals and the peer's share.
  void count_payload(int peer, bool sent, std::uint64_t n) {
    std::lock_guard l(mu_);
    TransportStats::PeerBytes& b = stats_.peer_bytes[peer];
    (sent ? stats_.bytes_sent : stats_.bytes_received) += n;
    (sent ? b.sent : b.received) += n;
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
  // A link to `p` could not be made (our dial, or a connection from it that never completed its
  // handshake): remembers `why` for describe_unconnected and logs it once per distinct cause.
  void note_link_failure(Peer& p, const Status& why, bool our_dial);
  void do_accept();
  void on_tick();
  void begin_shutdown();
  void fail_everything(const Status& s);
  // Adds `state` to live_exchanges_, pruning expired entries first when it has doubled.
  void track_exchange(const std::shared_ptr<ExchangeState>& state);

  TransportOptions opts_;
  std::uint64_t model_bytes_ = 0;
  asio::io_context io_{1};
  asio::executor_work_guard<asio::io_context::executor_type> work_{io_.get_executor()};
  std::shared_ptr<asio::ssl::context> ssl_;
  tcp::acceptor acceptor_{io_};
  asio::steady_timer tick_{io_};
  std::thread thread_;
  std::map<int, Peer> peers_;                    // io thread
  std::set<std::shared_ptr<Session>> sessions_;  // io thread: every live session
  // io thread, for shutdown: the exchanges posted, so that shutdown can release their waiters.
  // Each weak_ptr pins its ExchangeState's allocation (make_shared), so track_exchange() prunes
  // the expired ones whenever the vector doubles: it never holds more than twice the exchanges
  // alive (plus kMinPrune), whatever the number of iterations.
  std::vector<std::weak_ptr<ExchangeState>> live_exchanges_;
  std::size_t prune_at_ = kMinPrune;  // io thread
  static constexpr std::size_t kMinPrune = 64;
  bool stopping_ = false;                                 // io thread
  ControlHandler control_handler_;                        // io thread
  std::deque<std::pair<int, std::string>> held_control_;  // io thread: (peer, message)

  mutable std::mutex mu_;  // guards the fields below
  std::condition_variable cv_;
  TransportStats stats_;
  std::optional<Status>
      config_mismatch_;  // the first Hello we refused for a configuration mismatch
  std::set<int> connected_;
  std::map<int, std::string> link_errors_;  // neighbour -> the last reason a link failed
  std::map<int, pb::Hello> hellos_;
  std::map<int, std::uint64_t> peer_iterations_;
  std::uint32_t degree_ = 0;
  std::uint64_t iteration_ = 0;
  std::size_t live_sessions_ = 0;
  bool shut_down_ = false;
};

}  // namespace gossip::net
