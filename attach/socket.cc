// Message I/O of the attach protocol (attach_socket.h): poll() deadlines over a non-blocking
// socket, recvmsg/sendmsg for the descriptors.
#include "attach/socket.h"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace gossip::attach {

namespace {

using Clock = std::chrono::steady_clock;

// Milliseconds left until `deadline` for poll(), at least 0, at most a day (poll takes an int).
int poll_timeout_ms(Clock::time_point deadline) {
  const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return static_cast<int>(std::clamp<long long>(left, 0, 24LL * 3600 * 1000));
}

void take_fds(msghdr& msg, std::vector<int>* fds);
void close_all(std::vector<int>* fds);

}  // namespace

int wait_fd(int fd, short events, Clock::time_point deadline) {
  for (;;) {
    pollfd p{fd, events, 0};
    const int n = ::poll(&p, 1, poll_timeout_ms(deadline));
    if (n > 0) return 1;
    if (n == 0) {
      if (Clock::now() >= deadline) return 0;
      continue;  // poll rounds down near the deadline
    }
    if (errno != EINTR) return -1;
  }
}

namespace {

void take_fds(msghdr& msg, std::vector<int>* fds) {
  for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    const std::size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (std::size_t i = 0; i < count; ++i) {
      int fd;
      std::memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
      fds->push_back(fd);
    }
  }
}

void close_all(std::vector<int>* fds) {
  for (int fd : *fds) ::close(fd);
  fds->clear();
}

}  // namespace

Result<Message> read_message(int fd, Clock::time_point deadline, bool accept_fds) {
  Message m;
  std::string buf;
  std::size_t want = kHeaderBytes;
  bool have_header = false;
  while (buf.size() < want) {
    char chunk[4096];
    iovec iov{chunk, std::min(sizeof(chunk), want - buf.size())};
    alignas(cmsghdr) char control[CMSG_SPACE(4 * sizeof(int))];
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    if (accept_fds) {
      msg.msg_control = control;
      msg.msg_controllen = sizeof(control);
    }
    const ssize_t n = ::recvmsg(fd, &msg, MSG_CMSG_CLOEXEC);
    if (n > 0) {
      if (accept_fds) take_fds(msg, &m.fds);
      buf.append(chunk, static_cast<std::size_t>(n));
      if (!have_header && buf.size() == kHeaderBytes) {
        m.header = decode_header(std::as_bytes(std::span(buf)));
        if (m.header.magic != kMagic) {
          close_all(&m.fds);
          return corruption("a message without the attach magic");
        }
        if (m.header.payload_bytes > kMaxPayloadBytes) {
          close_all(&m.fds);
          return corruption("a " + message_type_name(m.header.type) + " of " +
                            std::to_string(m.header.payload_bytes) + " payload bytes (at most " +
                            std::to_string(kMaxPayloadBytes) + ")");
        }
        have_header = true;
        want += m.header.payload_bytes;
      }
      continue;
    }
    const int err = n == 0 ? 0 : errno;
    if (err == EINTR) continue;
    if (err == EAGAIN || err == EWOULDBLOCK) {
      const int r = wait_fd(fd, POLLIN, deadline);
      if (r > 0) continue;
      close_all(&m.fds);
      if (r == 0) return deadline_exceeded("deadline");
      return io_error(std::string("poll(): ") + std::strerror(errno));
    }
    close_all(&m.fds);
    if (n == 0) return unavailable("EOF");
    if (err == ECONNRESET) return unavailable(std::strerror(err));
    return io_error(std::string("reading the attach socket: ") + std::strerror(err));
  }
  m.payload = buf.substr(kHeaderBytes);
  return m;
}

Status send_message(int fd, std::string_view bytes, int fd_to_pass, Clock::time_point deadline) {
  std::size_t sent = 0;
  while (sent < bytes.size()) {
    iovec iov{const_cast<char*>(bytes.data() + sent), bytes.size() - sent};
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
    if (fd_to_pass >= 0 && sent == 0) {
      msg.msg_control = control;
      msg.msg_controllen = sizeof(control);
      cmsghdr* c = CMSG_FIRSTHDR(&msg);
      c->cmsg_level = SOL_SOCKET;
      c->cmsg_type = SCM_RIGHTS;
      c->cmsg_len = CMSG_LEN(sizeof(int));
      std::memcpy(CMSG_DATA(c), &fd_to_pass, sizeof(int));
    }
    const ssize_t n = ::sendmsg(fd, &msg, MSG_NOSIGNAL);
    if (n > 0) {
      sent += static_cast<std::size_t>(n);
      continue;
    }
    const int err = errno;
    if (err == EINTR) continue;
    if (err == EAGAIN || err == EWOULDBLOCK) {
      const int r = wait_fd(fd, POLLOUT, deadline);
      if (r > 0) continue;
      if (r == 0) return deadline_exceeded("the peer stopped reading from the attach socket");
      return io_error(std::string("poll(): ") + std::strerror(errno));
    }
    if (err == EPIPE || err == ECONNRESET) return unavailable(std::strerror(err));
    return io_error(std::string("writing to the attach socket: ") + std::strerror(err));
  }
  return Status::ok();
}

}  // namespace gossip::attach
