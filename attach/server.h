// AttachServer: gossipd's side of "bring your own model" (docs/attach.md). One external trainer
// connects over a Unix-domain stream socket; its parameters live in a shared-memory buffer that
// the server creates (memfd_create, sealed against resizing) and passes to the trainer with
// SCM_RIGHTS, so no parameter byte crosses the socket. Wire format: attach/protocol.h.
//
// Use by the D-PSGD loop, one iteration t at a time (the same semantics and timing as the
// daemon's own step: the trainer's local step replaces the built-in one):
//
//   auto server = AttachServer::listen(path);          // bind + listen, socket mode 0600
//   server->accept(deadline, {...});                   // HELLO -> checks -> WELCOME + memfd
//   for t = start_iteration, ...:
//     auto x = server->wait_post(t, deadline);         // the trainer's x_t (after its local step)
//     ... send x_t to the neighbours, receive theirs ...
//     float gamma = with_update() ? *server->wait_update(t, deadline) : 0;   // u_t in update()
//     ... write sum_j W_ij x_j^t - gamma u_t into server->parameters() ...
//     server->reply_mixed(t);                          // the trainer may read and go on
//   server->close();                                   // BYE: training is over
//
// Any non-OK Status means the trainer is gone or misbehaved, the connection is closed, and the
// loop should leave the group (as for a dead node). The codes say why:
//   kUnavailable       the trainer disconnected (EOF, reset, broken pipe): it died
//   kDeadlineExceeded  nothing arrived by the deadline (the trainer hangs); ERROR sent to it
//   kAborted           the trainer sent ERROR (its text is in the message) or BYE before the end
//   kInvalidArgument   the trainer was refused at the handshake (version, dtype, count)
//   kCorruption        a malformed or unexpected message (bad magic, type, length, iteration)
//   kIoError           the operating system refused (socket, memfd, mmap)
//
// Socket path rules (listen): a path that exists and is not a socket is refused; a socket file
// nobody listens on (a stale one, left by a daemon that died) is removed; a socket somebody
// listens on is refused. The server listens until it is destroyed, and then unlinks its socket.
//
// Who is the trainer: only a connection that completes a HELLO. Until one does, the server keeps
// accepting; a connection that closes without a word (a health check, `nc -U`, another gossipd's
// "in use?" probe), sends something else (a wrong magic, another message, half a message that
// does not complete within 2 s) is dropped — with an ERROR (kProtocol) where it sent something —
// and logged, and the wait goes on. A HELLO that is refused (version, flags, dtype, count) ends
// the wait with that refusal. Once a trainer said HELLO, every further connection gets an ERROR
// (kRefused, "a trainer is already attached ...") and is closed, by a helper thread that touches
// nothing but the listening socket, so the session is never disturbed.
//
// Shared memory: parameters() is a span of num_params floats at offset 0 of the memfd; in an
// update session (the trainer's HELLO set kHelloUpdate) update() is a second span of num_params
// floats at the next page boundary. Ownership, ordered by the socket messages (a write made
// before sending a message is visible to the side that received it):
//   - MIXED(t-1) .. POST(t): both regions are the trainer's; the daemon must not touch them.
//   - POST(t) .. MIXED(t), plain session: both are the daemon's.
//   - POST(t) .. UPDATE(t), update session: the parameters are read-only for both sides (the
//     daemon sends them, the trainer computes u_t at them); the update region is the trainer's.
//   - UPDATE(t) .. MIXED(t), update session: both are the daemon's.
// The spans stay valid until the server is destroyed.
//
// Thread safety: none; one thread (the loop's) uses a server (the refusing helper thread above is
// internal). Every blocking call has a deadline. SIGPIPE is never raised (MSG_NOSIGNAL).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <thread>

#include "attach/protocol.h"
#include "attach/socket.h"
#include "common/status.h"

namespace gossip::attach {

// What the daemon tells (and asks of) the trainer at the handshake.
struct AttachOptions {
  // Refuse a trainer announcing another parameter count (the refusal names both counts). Unset:
  // any count up to max_num_params is accepted (the daemon then learns the size from the trainer).
  std::optional<std::uint64_t> expected_num_params;
  std::uint64_t max_num_params = std::uint64_t{1} << 34;  // 64 GiB of float32
  std::uint32_t node_id = 0;          // this node's id and the group's size, for the trainer's
  std::uint32_t num_nodes = 1;        // data sharding
  std::uint64_t start_iteration = 0;  // the first POST must carry this iteration
  std::uint32_t local_steps = 1;      // the trainer's own steps per POST (WELCOME tells it)
  // Non-empty (num_params floats): copied into the buffer before WELCOME, with the flag telling
  // the trainer to load them (resuming from a checkpoint of the mixed state).
  std::span<const float> initial_parameters;
};

// What a supervisor (gossipd launch) finds at an attach socket: nobody serving it (no socket, or
// a stale one), a server still waiting for its trainer's HELLO, or a server whose trainer said
// HELLO — told apart by the ERROR a server sends every connection once its trainer is attached.
enum class AttachSocketState { kNotServed, kWaitingForTrainer, kTrainerAttached };

// Connects to `socket_path` and waits up to `wait` for that ERROR; sends nothing. A server still
// waiting sees a connection that closes without a word (logged, and the wait goes on).
AttachSocketState probe_attach_socket(const std::string& socket_path,
                                      std::chrono::milliseconds wait);

class AttachServer {
 public:
  // Binds and listens on `socket_path` (rules above). Errors name the path.
  static Result<std::unique_ptr<AttachServer>> listen(const std::string& socket_path);

  ~AttachServer();  // closes the connection (no BYE: call close() for a clean end), unlinks
  AttachServer(const AttachServer&) = delete;
  AttachServer& operator=(const AttachServer&) = delete;

  // Waits for the trainer to connect and say HELLO (connections that do not are dropped, above),
  // checks version (kProtocolVersion), dtype
  // (float32) and count, creates the buffer and answers WELCOME with it. Returns the parameter
  // count. A refused trainer gets an ERROR (code kRefused) with the same text as the Status.
  // Succeeds at most once; after kDeadlineExceeded with nobody connected it may be called again.
  Result<std::uint64_t> accept(std::chrono::steady_clock::time_point deadline,
                               const AttachOptions& options);
  // accept() in two halves, for a daemon that must know the parameter count before it can say
  // where training starts (gossipd reads its checkpoints for that count): accept_hello() does
  // everything up to the checks (options.start_iteration and initial_parameters are not used);
  // welcome() creates the buffer and answers WELCOME. A failure of either closes the connection.
  Result<std::uint64_t> accept_hello(std::chrono::steady_clock::time_point deadline,
                                     const AttachOptions& options);
  Status welcome(std::uint64_t start_iteration, std::span<const float> initial_parameters);

  // Waits for POST(iteration) and returns the buffer (x_t). A POST with another iteration is a
  // protocol error (kCorruption).
  Result<std::span<float>> wait_post(std::uint64_t iteration,
                                     std::chrono::steady_clock::time_point deadline);

  // Update sessions only: waits for UPDATE(iteration), after its POST, and returns γ_t (u_t is in
  // update()). Another message or iteration is a protocol error (kCorruption).
  Result<float> wait_update(std::uint64_t iteration,
                            std::chrono::steady_clock::time_point deadline);

  // Tells the trainer that the buffer now holds the mixed parameters of `iteration` (after its
  // POST and, in an update session, its UPDATE).
  Status reply_mixed(std::uint64_t iteration);

  // Sends ERROR (code kAborted, `message`) best-effort and closes the connection: the daemon
  // stops (left the group, diverged, stopped by a signal). Safe to call in any state.
  void fail(std::string_view message);

  // Sends BYE and closes the connection: training is over. OK if the trainer already left.
  Status close();

  // The shared buffer: num_params floats (empty before accept()).
  std::span<float> parameters() const { return params_; }
  // The update region (empty unless the trainer asked for an update session).
  std::span<float> update() const { return update_; }
  // Whether the trainer's HELLO asked for an update session (known after accept_hello()).
  bool with_update() const { return with_update_; }
  std::uint64_t num_params() const { return params_.size(); }
  bool connected() const { return conn_fd_ >= 0; }
  const std::string& socket_path() const { return socket_path_; }

 private:
  AttachServer(std::string socket_path, int listen_fd);

  Result<attach::Message> read_message(std::chrono::steady_clock::time_point deadline,
                                       std::string_view waiting_for);
  // The next message, which must be `expected` with `payload_bytes`: an ERROR or BYE instead is
  // kAborted, anything else a protocol error (ERROR sent, kCorruption).
  Result<attach::Message> read_expected(attach::MessageType expected, std::size_t payload_bytes,
                                        const std::string& what,
                                        std::chrono::steady_clock::time_point deadline);
  Status send_bytes(std::string_view bytes, int fd_to_pass = -1);
  Status refuse(attach::ErrorCode code, Status status);  // sends ERROR(status text), closes
  Status create_buffer(std::uint64_t num_params, attach::Welcome* welcome);
  void close_connection();
  void stop_listening();
  // Accepts connections until one says HELLO (or the deadline); that one becomes conn_fd_.
  Result<attach::Message> wait_for_hello(std::chrono::steady_clock::time_point deadline);
  // After the HELLO: refuse every later connection from a helper thread.
  void start_refusing();

  std::string socket_path_;
  int listen_fd_ = -1;
  std::thread refuser_;  // refuse_newcomers() on listen_fd_ once a trainer said HELLO
  int wake_fd_ = -1;     // an eventfd that stops refuser_
  int conn_fd_ = -1;
  int memfd_ = -1;
  void* mapping_ = nullptr;
  std::size_t mapping_bytes_ = 0;
  std::span<float> params_;
  std::span<float> update_;
  bool with_update_ = false;
  std::optional<std::uint64_t> posted_;  // the POST not yet answered by reply_mixed
  bool updated_ = false;                 // its UPDATE arrived (update sessions)
  bool accepted_ = false;
  AttachOptions options_;               // of accept_hello, for welcome
  std::uint64_t hello_num_params_ = 0;  // the count the trainer announced
};

}  // namespace gossip::attach
