// Transport: authenticated, framed exchange of float32 parameter buffers with a fixed set of
// neighbours over TCP (TLS 1.3 with mutual certificates, or plaintext when asked to).
//
// net knows nothing of SGD or topology files. The caller (the daemon) says who it is (Identity),
// where to listen, and which neighbours exist with their addresses; net keeps one connection per
// neighbour pair (the lower node id dials, with exponential backoff, so a neighbour that starts
// later is found), checks every byte that arrives, and reports misbehaving or silent peers by id
// and reason instead of blocking.
//
// The per-iteration loop at node i:
//
//   auto ex = transport->exchange(t, x_t, out_neighbours, {{j, recv_buf_j}, ...});
//   ... compute the gradient meanwhile ...
//   while (auto c = ex->next_chunk(deadline)) mix(c->peer, c->offset, c->count);  // optional
//   ExchangeResult r = ex->wait(deadline);   // r.failures: {peer id, reason}
//
// Threading: one io_context thread owns every socket and all connection state; the methods
// below may be called from any thread (they post to it). Buffers passed to exchange() / send()
// are borrowed: the transport reads `send` and writes the receive buffers until the exchange's
// wait() returns (or the send callback ran), and never touches them afterwards. Iteration tags
// are enforced: a receive for iteration t only ever gets iteration-t data; a frame that arrives
// one iteration early is buffered, a stale one is discarded, and a peer further ahead is paused
// (TCP back-pressure) until the receiver catches up.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "net/handshake.h"
#include "net/tls.h"

namespace gossip::net {

using Deadline = std::chrono::steady_clock::time_point;

// A deadline `ms` milliseconds from now.
Deadline deadline_in_ms(std::int64_t ms);

// OK when this process may set TCP congestion control `name` on its sockets; otherwise
// InvalidArgument naming the algorithms the kernel has and the ones an unprivileged process may
// choose (net.ipv4.tcp_allowed_congestion_control).
Status check_congestion_control(const std::string& name);
// setsockopt(TCP_CONGESTION) on `fd`.
Status set_congestion_control(int fd, const std::string& name);

// What the links use for a configured congestion control (the training config's
// link.congestion_control, docs/daemon.md):
//   "auto" (the default): where the host's default is BBR, CUBIC or else Reno, whichever this
//     process may set first; any other host default is kept. BBR sends each message of a
//     time-varying topology (a link idle between uses) below the link rate (docs/cluster.md).
//   "host" or "": the host's default (net.ipv4.tcp_congestion_control), whatever it is.
//   a name: that one, refused as check_congestion_control says.
// `name` is what TransportOptions::congestion_control takes ("" = the host's default) and
// `reason` one line for the log.
struct CongestionChoice {
  std::string name;
  std::string reason;
};
Result<CongestionChoice> choose_congestion_control(const std::string& configured);

struct PeerAddress {
  int node_id = -1;
  std::string host;  // IPv4/IPv6 literal or host name
  std::uint16_t port = 0;
};

struct TransportOptions {
  Identity self;                        // job id, node id, topology and model fingerprints
  std::string listen_host = "0.0.0.0";  // "::" for IPv6
  std::uint16_t listen_port = 0;        // 0: the OS picks one (see Transport::port())
  // Every in- and out-neighbour, once each. Only these ids may connect; nobody else is accepted.
  std::vector<PeerAddress> neighbours;
  // Plaintext, unauthenticated links for trusted networks and benchmarks. Off by default; a
  // warning is logged at start. Otherwise `tls` must name the CA, certificate and key files.
  bool insecure = false;
  TlsConfig tls;
  // start() refuses our own certificate when it is expired, not from the cluster CA, or names
  // another node or job (check_own_certificate). Only tests turn this off, to play a misconfigured
  // peer and prove that the other end refuses it at the handshake.
  bool check_own_certificate = true;
  std::size_t chunk_bytes = std::size_t{4} << 20;  // parameters travel in chunks of this size
  // Unsent bytes the kernel may hold per link (TCP_NOTSENT_LOWAT); 0: no limit (the kernel's
  // default). A write completes when its bytes are close to the wire, not when they are queued
  // behind megabytes of an earlier iteration, so a node does not start iteration t+1's sends
  // while t's still fill its socket buffers, and one iteration's message gets the whole link.
  std::uint32_t notsent_lowat_bytes = 128 << 10;
  // TCP congestion control of every link (TCP_CONGESTION, e.g. "reno"); empty: the host's
  // default. start() refuses one this process may not use, naming the ones it may.
  std::string congestion_control;
  std::int64_t handshake_timeout_ms = 5000;      // TCP connect + TLS + Hello, per attempt
  std::int64_t heartbeat_interval_ms = 500;      // sent when the link is otherwise idle
  std::int64_t peer_timeout_ms = 5000;           // no byte for this long: the link is dropped
  std::int64_t connect_backoff_initial_ms = 20;  // dial retry backoff, doubling ...
  std::int64_t connect_backoff_max_ms = 1000;    // ... up to this
  // Frames of every neighbour below this tag are stale from the start (discarded) until
  // Transport::reset_floor says where a link's numbering starts: UINT64_MAX for a caller that
  // agrees on that with each neighbour whenever a link comes up (asynchronous push-sum under
  // carry-on), so that nothing queued for an earlier connection can fill or block a receive.
  std::uint64_t initial_floor = 0;
  // Announced in Hello for membership / fault handling (see set_local_state).
  std::uint32_t degree = 0;
  std::uint64_t iteration = 0;
};

// Where control messages from neighbours go (Transport::set_control_handler). A control message is
// opaque bytes of the caller's own protocol (gossipd's: daemon/control.proto), carried in a
// Heartbeat frame; net never reads it. Called on the io thread, in arrival order, for each
// non-empty message from a connected neighbour; must not block. Returns Corruption (or any error)
// for bytes that are not a message of the caller's protocol: the frame then counts as a bad frame
// and its link is closed, as for any malformed frame.
using ControlHandler = std::function<Status(int peer, std::string_view control)>;

struct PeerFailure {
  int peer = -1;
  Status status;  // DeadlineExceeded, Unavailable (link lost), Corruption (bad frame), ...
};

// `count` floats at float offset `offset` of the receive buffer for `peer` now hold iteration
// `iteration`'s data (checksum verified).
struct ChunkEvent {
  int peer = -1;
  std::uint64_t iteration = 0;
  std::size_t offset = 0;
  std::size_t count = 0;
};

struct RecvSpec {
  int peer = -1;
  std::span<float> buffer;  // exactly param_count floats
};

struct ExchangeResult {
  std::vector<PeerFailure> failures;  // one entry per failed send or receive
  bool ok() const { return failures.empty(); }
};

struct ExchangeState;  // internal

// The sends and receives of one iteration. Use from one thread at a time.
class Exchange {
 public:
  explicit Exchange(std::shared_ptr<ExchangeState> state) : state_(std::move(state)) {}
  ~Exchange();  // abandons whatever is unfinished, like wait(now)

  // The next verified chunk, in arrival order, or nullopt once every receive has completed or
  // failed, or when `deadline` passes first.
  std::optional<ChunkEvent> next_chunk(Deadline deadline);

  // Waits until every send and receive completed or failed, or `deadline` passed; then abandons
  // the rest (reported as DeadlineExceeded; a link that was mid-chunk is reset so that the
  // buffer is released). After it returns the transport no longer touches this exchange's
  // buffers. Calling it again returns the same result.
  ExchangeResult wait(Deadline deadline);

  // Whether every send has completed or failed (receives may still be open). Does not wait.
  bool sends_done() const;
  // Whether every send and every receive has completed or failed: wait() would return at once.
  // Does not wait.
  bool resolved() const;

  std::uint64_t iteration() const;

 private:
  std::shared_ptr<ExchangeState> state_;
};

struct TransportStats {
  std::uint64_t connections_established = 0;
  std::uint64_t handshakes_rejected = 0;  // TLS failures, wrong identity, Hello mismatch
  std::uint64_t bad_frames = 0;           // limit violations, malformed messages, bad checksum
  std::uint64_t links_timed_out = 0;      // silent for peer_timeout_ms
  std::uint64_t stale_frames = 0;         // Params for an iteration already finished
  std::uint64_t bytes_sent = 0;           // payload bytes
  std::uint64_t bytes_received = 0;       // payload bytes delivered or staged
  // Params chunks that arrived without a CRC32C (TLS links only: AES-GCM authenticated them).
  std::uint64_t unchecksummed_chunks = 0;
  // Control messages dropped because kMaxHeldControl were already held for a handler not yet set.
  std::uint64_t control_dropped = 0;
  // Exchanges the transport keeps a (weak) handle of, for shutdown: at most twice those whose
  // Exchange is still alive, plus 64 — bounded however long the run (a gauge, not a counter).
  std::uint64_t exchanges_tracked = 0;
  // bytes_sent and bytes_received split by neighbour id (every neighbour that ever carried a
  // payload byte; the sums over neighbours are the two totals above).
  struct PeerBytes {
    std::uint64_t sent = 0;
    std::uint64_t received = 0;
  };
  std::map<int, PeerBytes> peer_bytes;
};

class Transport {
 public:
  // Validates the options, loads the TLS material, binds the listening socket and starts the
  // io thread, which dials every higher-id neighbour. Errors say which option or file is wrong.
  static Result<std::unique_ptr<Transport>> start(TransportOptions options);
  ~Transport();  // shutdown()

  Transport(const Transport&) = delete;
  Transport& operator=(const Transport&) = delete;

  std::uint16_t port() const;  // the bound listening port
  int node_id() const;

  // Posts one iteration: sends `data` (param_count floats, chunked) to each id in `to` and
  // receives each spec's buffer from its peer. Sends to a neighbour not yet connected wait
  // for the connection (within the exchange's deadline).
  std::shared_ptr<Exchange> exchange(std::uint64_t iteration, std::span<const float> data,
                                     std::span<const int> to, std::span<const RecvSpec> recvs);

  // One zero-copy send: `done` runs exactly once on the io thread (it must not block) with OK
  // when every chunk was handed to the kernel, or why not. `data` must stay valid until then.
  void send(int peer, std::uint64_t iteration, std::span<const float> data,
            std::function<void(Status)> done);

  // Blocks until every neighbour in `peers` has an established link, or the deadline passes.
  bool wait_connected(std::span<const int> peers, Deadline deadline);
  std::vector<int> connected_peers() const;
  // The neighbours of `peers` without an established link, each with where it is and why it is
  // not connected: "node 1 at db-7:7001: cannot resolve db-7: Host not found; node 2 (it dials
  // this node): no connection from it yet". "" when all are connected. For the caller's message
  // when it stops waiting for them (the transport logs each distinct dial failure once itself).
  std::string describe_unconnected(std::span<const int> peers) const;
  // The Hello a connected neighbour sent (its degree, iteration and extras), if connected.
  std::optional<pb::Hello> peer_hello(int peer) const;

  // Degree and iteration announced in Hellos of connections made from now on (and the iteration
  // in every Heartbeat).
  void set_local_state(std::uint32_t degree, std::uint64_t iteration);

  // Sends one control message (opaque bytes, see ControlHandler; with its Heartbeat at most the 1
  // KiB a session frame's message may have, net/frame.h) to `peer` after what is already queued on
  // the link. Dropped when there is no established link (control messages are only meaningful on a
  // live one).
  void send_control(int peer, std::string control);
  // Control messages from now on go to `handler` (replacing the previous one). Those that arrived
  // while no handler was set are held, in arrival order, and handed to the first handler set (at
  // most kMaxHeldControl of them; later ones are dropped, counted in
  // TransportStats::control_dropped); a held message the handler refuses counts as a bad frame.
  // So a consumer made after start() misses nothing.
  void set_control_handler(ControlHandler handler);
  static constexpr std::size_t kMaxHeldControl = 4096;
  // The latest iteration `peer` announced on its current link (Hello, then Heartbeats), if
  // connected.
  std::optional<std::uint64_t> peer_iteration(int peer) const;
  // Frames of `peer` for iterations below `iteration` are stale from now on (discarded): used
  // when a dropped neighbour is re-admitted at a later iteration, so that nothing it sent before
  // the gap can block or fill a receive.
  void skip_before(int peer, std::uint64_t iteration);
  // Frames of `peer` below `floor` are stale from now on and those at or above it are not: sets
  // the floor, lower or higher, with no receive from `peer` posted below it. Called from a control
  // handler (the io thread), it takes effect before the link's next frame is read, so a control
  // message can say where the data behind it starts.
  void reset_floor(int peer, std::uint64_t floor);

  TransportStats stats() const;
  // Why we refused a peer's Hello for a configuration mismatch (another job id, algorithm,
  // topology or model: InvalidArgument from check_peer_hello), the first time it happened; such a
  // peer is refused again on every retry, so the caller may give up at once.
  std::optional<Status> config_mismatch() const;

  // Sends Goodbye to every peer after what is queued, waits up to `flush_timeout_ms` for the
  // writes to finish, closes everything and joins the io thread. Unfinished exchanges fail
  // with Unavailable. Idempotent.
  void shutdown(std::int64_t flush_timeout_ms = 1000);

  class Impl;

 private:
  explicit Transport(std::shared_ptr<Impl> impl);
  std::shared_ptr<Impl> impl_;
};

}  // namespace gossip::net
