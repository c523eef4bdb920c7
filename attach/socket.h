// Message I/O of the attach protocol on a connected Unix stream socket, shared by both ends
// (AttachServer, AttachClient): one whole message in or out, with a deadline, and the file
// descriptors that travel with it (SCM_RIGHTS). The socket must be non-blocking; SIGPIPE is never
// raised (MSG_NOSIGNAL). Errors carry a short reason only; the callers say what they waited for.
#pragma once

#include <chrono>
#include <string>
#include <string_view>
#include <vector>

#include "attach/protocol.h"
#include "common/status.h"

namespace gossip::attach {

struct Message {
  Header header;
  std::string payload;
  std::vector<int> fds;  // received descriptors, owned by the receiver (close them)
};

// Reads one message. Status codes: kUnavailable the peer closed or reset the connection (message
// "EOF" or the errno text), kDeadlineExceeded nothing complete by `deadline`, kCorruption a header
// without the magic or with more than kMaxPayloadBytes of payload, kIoError anything else.
// `accept_fds`: whether descriptors may come with the message; if false, none can be received
// (the kernel closes any a peer sends).
Result<Message> read_message(int fd, std::chrono::steady_clock::time_point deadline,
                             bool accept_fds);

// Writes `bytes` (one or more whole messages), passing `fd_to_pass` (if >= 0) with the first
// byte. Status codes: kUnavailable the peer is gone (EPIPE, ECONNRESET), kDeadlineExceeded the
// peer stopped reading, kIoError anything else.
Status send_message(int fd, std::string_view bytes, int fd_to_pass,
                    std::chrono::steady_clock::time_point deadline);

// Waits until `fd` has `events` (poll(2) flags) or `deadline` passes: 1 ready, 0 deadline passed,
// -1 error (errno set).
int wait_fd(int fd, short events, std::chrono::steady_clock::time_point deadline);

}  // namespace gossip::attach
