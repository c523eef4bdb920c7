// AttachClient: the trainer's side of the attach protocol in C++ (docs/attach.md), for trainers
// written in C++/CUDA and for tests that attach a trainer running gossip_sgd's own step to
// gossipd. The Python package python/gossip_sgd is the other implementation of this side.
//
//   auto client = AttachClient::connect(path, num_params, deadline);  // HELLO, WELCOME, mmap
//   for (;;) {
//     ... write x_t into (*client)->parameters() ...
//     Status s = (*client)->post();                  // the daemon sends x_t to its neighbours
//     ... meanwhile the local step's update u_t at x_t (on the trainer's own copy) ...
//     if (s.is_ok()) s = (*client)->wait_mixed(deadline);  // buffer: sum_j W_ij x_j^t
//     if (!s.is_ok()) break;                         // kOutOfRange: training over (BYE)
//     ... x_{t+1} = mixed - gamma u_t ...
//   }
//   (*client)->close();                              // BYE
//
// An update session (connect(..., attach::kHelloUpdate)) moves the last step into the daemon, so
// that the trainer's parameters never leave the shared buffer: after post() the trainer computes
// u_t at x_t reading parameters() (read-only now), writes u_t into update() and calls
// send_update(gamma); the daemon's mix then writes x_{t+1} = sum_j W_ij x_j^t - gamma u_t into
// parameters(), in the same pass and rounding as gossipd's own step.
//
// Status codes of connect() and post_and_get(); after any non-OK one the connection is closed:
//   kUnavailable       nobody listens on the path, or the daemon closed the connection or died
//   kInvalidArgument   refused at the handshake (version, dtype, count); the daemon's text
//   kAborted           the daemon stopped and said why (ERROR); its text
//   kOutOfRange        the daemon ended training (BYE): there are no more iterations
//   kDeadlineExceeded  no answer by the deadline
//   kCorruption        a malformed or unexpected message
//   kIoError           the operating system refused (socket, mmap)
//
// parameters() stays valid until the client is destroyed. Not thread-safe: one thread uses a
// client.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "attach/protocol.h"
#include "attach/socket.h"
#include "common/status.h"

namespace gossip::attach {

class AttachClient {
 public:
  // Connects to the daemon's socket, says HELLO (float32, `num_params`) and maps the buffer of
  // the WELCOME. Does not retry: nobody listening is kUnavailable at once.
  static Result<std::unique_ptr<AttachClient>> connect(
      const std::string& socket_path, std::uint64_t num_params,
      std::chrono::steady_clock::time_point deadline, std::uint32_t hello_flags = 0);

  ~AttachClient();  // closes without BYE (the daemon sees EOF): call close() for a clean end
  AttachClient(const AttachClient&) = delete;
  AttachClient& operator=(const AttachClient&) = delete;

  // POST(next_iteration()), then waits for its MIXED; the iteration counter moves on.
  Status post_and_get(std::chrono::steady_clock::time_point deadline);
  // The same in two halves, so that the trainer computes while its daemon exchanges: after
  // post() the buffer belongs to the daemon until wait_mixed() returns (the trainer keeps its own
  // copy of x_t for the gradient). post() then post() again, or wait_mixed() without post(), is
  // kFailedPrecondition. A daemon that left is reported by wait_mixed(), with its reason.
  Status post();
  Status wait_mixed(std::chrono::steady_clock::time_point deadline);
  // Update sessions: after post(), u_t is in update(); the daemon subtracts gamma u_t in its mix.
  // Required once per iteration between post() and wait_mixed().
  Status send_update(float gamma);

  // Sends BYE and closes. OK if the daemon already left.
  Status close();
  // Sends ERROR (code kAborted, `message`) best-effort and closes.
  void fail(std::string_view message);

  std::span<float> parameters() const { return params_; }
  std::span<float> update() const { return update_; }          // empty outside an update session
  const attach::Welcome& welcome() const { return welcome_; }  // node id, start iteration, flags
  std::uint64_t next_iteration() const { return next_iteration_; }
  bool connected() const { return fd_ >= 0; }

 private:
  AttachClient(std::string socket_path, int fd);
  Status read_answer(std::chrono::steady_clock::time_point deadline, std::string_view waiting_for,
                     attach::Message* message);
  void close_connection();
  // Sends `message` (`what`, e.g. "POST(7)"); on success sets *sent_flag. A daemon that closed
  // may have said why first (BYE, ERROR): wait_mixed() reads that rather than this reporting a
  // broken pipe; any other failure closes the connection and is returned.
  Status send_checked(const std::string& message, const std::string& what, bool* sent_flag);

  std::string socket_path_;
  int fd_ = -1;
  attach::Welcome welcome_;
  void* mapping_ = nullptr;
  std::span<float> params_;
  std::span<float> update_;
  std::uint64_t next_iteration_ = 0;
  bool posted_ = false;   // POST(next_iteration_) sent, its MIXED not read yet
  bool updated_ = false;  // its UPDATE sent (update sessions)
};

}  // namespace gossip::attach
