// AttachClient (contract in attach_client.h) over the shared message I/O of attach_socket.h.
#include "attach/client.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "attach/socket.h"

namespace gossip::attach {

using attach::MessageType;
using Clock = std::chrono::steady_clock;

namespace {
constexpr auto kSendTimeout = std::chrono::seconds(10);
}  // namespace

AttachClient::AttachClient(std::string socket_path, int fd)
    : socket_path_(std::move(socket_path)), fd_(fd) {}

AttachClient::~AttachClient() {
  close_connection();
  if (mapping_ != nullptr) ::munmap(mapping_, welcome_.buffer_bytes);
}

void AttachClient::close_connection() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

Result<std::unique_ptr<AttachClient>> AttachClient::connect(const std::string& socket_path,
                                                            std::uint64_t num_params,
                                                            Clock::time_point deadline,
                                                            std::uint32_t hello_flags) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (socket_path.empty() || socket_path.size() >= sizeof(addr.sun_path)) {
    return invalid_argument("attach socket path '" + socket_path + "' is empty or too long");
  }
  std::memcpy(addr.sun_path, socket_path.data(), socket_path.size());
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return io_error(std::string("socket(): ") + std::strerror(errno));
  // Connect blocking (a Unix socket connects at once or fails), then switch to non-blocking I/O.
  if (::connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) != 0) {
    const int err = errno;
    ::close(fd);
    return unavailable("no gossipd listens on " + socket_path + " (" + std::strerror(err) + ")");
  }
  const int flags = ::fcntl(fd, F_GETFL);
  ::fcntl(fd, F_SETFL, flags | O_NONBLOCK);
  std::unique_ptr<AttachClient> client(new AttachClient(socket_path, fd));

  const std::string hello = attach::encode_hello(
      {num_params, static_cast<std::uint32_t>(attach::Dtype::kFloat32), hello_flags});
  if (Status s = attach::send_message(fd, hello, -1, deadline); !s.is_ok()) {
    client->close_connection();
    return s.with_context("sending HELLO to " + socket_path);
  }
  attach::Message m;
  GOSSIP_RETURN_IF_ERROR(client->read_answer(deadline, "WELCOME", &m));
  const int memfd = m.fds.empty() ? -1 : m.fds.front();
  for (std::size_t i = 1; i < m.fds.size(); ++i) ::close(m.fds[i]);
  if (m.header.type != static_cast<std::uint16_t>(MessageType::kWelcome) ||
      m.payload.size() != attach::kWelcomeBytes || memfd < 0) {
    if (memfd >= 0) ::close(memfd);
    client->fail("expected WELCOME with the parameter buffer");
    return corruption("expected WELCOME with a file descriptor from " + socket_path + ", got " +
                      attach::message_type_name(m.header.type));
  }
  const attach::Welcome w = attach::decode_welcome(std::as_bytes(std::span(m.payload)));
  const bool with_update = (hello_flags & attach::kHelloUpdate) != 0;
  const auto region_fits = [&](std::uint64_t offset) {
    return offset % sizeof(float) == 0 && offset <= w.buffer_bytes &&
           num_params <= (w.buffer_bytes - offset) / sizeof(float);
  };
  if (w.num_params != num_params || !region_fits(w.params_offset) ||
      (with_update && (w.update_offset == 0 || !region_fits(w.update_offset)))) {
    ::close(memfd);
    client->fail("WELCOME does not fit the HELLO");
    return corruption("WELCOME from " + socket_path +
                      " does not fit the HELLO: " + std::to_string(w.num_params) +
                      " parameters at offset " + std::to_string(w.params_offset) + " in " +
                      std::to_string(w.buffer_bytes) + " bytes" +
                      (with_update ? ", update at " + std::to_string(w.update_offset) : ""));
  }
  void* p = ::mmap(nullptr, w.buffer_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, memfd, 0);
  const int err = errno;
  ::close(memfd);
  if (p == MAP_FAILED) {
    client->fail("the trainer could not map the parameter buffer");
    return io_error(std::string("mapping the parameter buffer: ") + std::strerror(err));
  }
  client->welcome_ = w;
  client->mapping_ = p;
  client->params_ = std::span<float>(
      reinterpret_cast<float*>(static_cast<char*>(p) + w.params_offset), num_params);
  if (with_update) {
    client->update_ = std::span<float>(
        reinterpret_cast<float*>(static_cast<char*>(p) + w.update_offset), num_params);
  }
  client->next_iteration_ = w.start_iteration;
  return client;
}

Status AttachClient::read_answer(Clock::time_point deadline, std::string_view waiting_for,
                                 attach::Message* message) {
  const std::string waited = " while the trainer waited for " + std::string(waiting_for);
  auto m = attach::read_message(fd_, deadline, /*accept_fds=*/true);
  if (!m.is_ok()) {
    const Status& s = m.status();
    if (s.code() == StatusCode::kCorruption) fail("malformed message: " + s.message());
    close_connection();
    if (s.code() == StatusCode::kUnavailable) {
      return unavailable("gossipd at " + socket_path_ + " closed the connection (" + s.message() +
                         ")" + waited);
    }
    if (s.code() == StatusCode::kDeadlineExceeded) {
      return deadline_exceeded("no " + std::string(waiting_for) + " from gossipd at " +
                               socket_path_ + " by the deadline");
    }
    return Status(s.code(), "gossipd at " + socket_path_ + " sent " + s.message() + waited);
  }
  const auto type = static_cast<MessageType>(m->header.type);
  if (type == MessageType::kError || type == MessageType::kBye) {
    for (int fd : m->fds) ::close(fd);
    close_connection();
    if (type == MessageType::kBye) {
      return out_of_range("gossipd at " + socket_path_ + " ended training (BYE)" + waited);
    }
    const std::string text = m->payload.size() >= 4 ? m->payload.substr(4) : "";
    const std::uint32_t code =
        m->payload.size() >= 4 ? get_u32(reinterpret_cast<const std::byte*>(m->payload.data())) : 0;
    const std::string said = "gossipd at " + socket_path_ + ": " + text;
    if (code == static_cast<std::uint32_t>(attach::ErrorCode::kRefused))
      return invalid_argument(said);
    if (code == static_cast<std::uint32_t>(attach::ErrorCode::kProtocol)) return corruption(said);
    return aborted(said);
  }
  if (m->header.version != attach::kProtocolVersion) {
    for (int fd : m->fds) ::close(fd);
    fail("this trainer speaks attach protocol version " + std::to_string(attach::kProtocolVersion));
    return corruption("gossipd at " + socket_path_ + " sent protocol version " +
                      std::to_string(m->header.version) + waited);
  }
  *message = std::move(m).value();
  return Status::ok();
}

Status AttachClient::post() {
  if (fd_ < 0) return failed_precondition("the attach session on " + socket_path_ + " is closed");
  if (posted_) {
    return failed_precondition("POST(" + std::to_string(next_iteration_) +
                               ") was sent already: wait_mixed() comes next");
  }
  const std::uint64_t t = next_iteration_;
  return send_checked(attach::encode_iteration(MessageType::kPost, t),
                      "POST(" + std::to_string(t) + ")", &posted_);
}

Status AttachClient::send_checked(const std::string& message, const std::string& what,
                                  bool* sent_flag) {
  Status sent = attach::send_message(fd_, message, -1, Clock::now() + kSendTimeout);
  if (!sent.is_ok() && sent.code() != StatusCode::kUnavailable) {
    close_connection();
    return sent.with_context("sending " + what);
  }
  *sent_flag = true;
  return Status::ok();
}

Status AttachClient::wait_mixed(Clock::time_point deadline) {
  if (fd_ < 0) return failed_precondition("the attach session on " + socket_path_ + " is closed");
  if (!posted_) return failed_precondition("wait_mixed() without post()");
  if (!update_.empty() && !updated_) {
    return failed_precondition("wait_mixed() without send_update() in an update session");
  }
  posted_ = false;
  updated_ = false;
  const std::uint64_t t = next_iteration_;
  attach::Message m;
  const std::string what = "MIXED(" + std::to_string(t) + ")";
  GOSSIP_RETURN_IF_ERROR(read_answer(deadline, what, &m));
  for (int fd : m.fds) ::close(fd);
  if (m.header.type != static_cast<std::uint16_t>(MessageType::kMixed) ||
      m.payload.size() != attach::kIterationBytes ||
      get_u64(reinterpret_cast<const std::byte*>(m.payload.data())) != t) {
    fail("expected " + what);
    return corruption("expected " + what + " from gossipd at " + socket_path_ + ", got " +
                      attach::message_type_name(m.header.type));
  }
  ++next_iteration_;
  return Status::ok();
}

Status AttachClient::send_update(float gamma) {
  if (fd_ < 0) return failed_precondition("the attach session on " + socket_path_ + " is closed");
  if (update_.empty()) return failed_precondition("send_update() outside an update session");
  if (!posted_ || updated_) return failed_precondition("send_update() needs one post() before it");
  const std::uint64_t t = next_iteration_;
  return send_checked(attach::encode_update({t, gamma}), "UPDATE(" + std::to_string(t) + ")",
                      &updated_);
}

Status AttachClient::post_and_get(Clock::time_point deadline) {
  GOSSIP_RETURN_IF_ERROR(post());
  return wait_mixed(deadline);
}

Status AttachClient::close() {
  if (fd_ < 0) return Status::ok();
  Status s = attach::send_message(fd_, attach::encode_bye(), -1, Clock::now() + kSendTimeout);
  close_connection();
  return s.code() == StatusCode::kUnavailable ? Status::ok() : s;
}

void AttachClient::fail(std::string_view message) {
  if (fd_ < 0) return;
  (void)attach::send_message(fd_, attach::encode_error(attach::ErrorCode::kAborted, message), -1,
                             Clock::now() + kSendTimeout);
  close_connection();
}

}  // namespace gossip::attach
