// AttachServer (contract in attach.h). Plain POSIX sockets with poll() deadlines rather than Asio:
// there is one peer, one outstanding message at a time, and the caller is the loop's own thread,
// which blocks on the trainer anyway; an io_context would add a thread hand-off and nothing else.
#include "attach/server.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <optional>
#include <vector>

#include "common/log.h"

namespace gossip::attach {

using attach::ErrorCode;
using attach::MessageType;
using Clock = std::chrono::steady_clock;

namespace {

std::string errno_text(int err) { return std::strerror(err); }

constexpr auto kSendTimeout = std::chrono::seconds(10);

Result<sockaddr_un> unix_address(const std::string& path) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.empty() || path.size() >= sizeof(addr.sun_path)) {
    return invalid_argument("attach socket path '" + path + "' must have 1 to " +
                            std::to_string(sizeof(addr.sun_path) - 1) + " bytes (it has " +
                            std::to_string(path.size()) + ")");
  }
  std::memcpy(addr.sun_path, path.data(), path.size());
  return addr;
}

// Removes a socket file nobody listens on; refuses anything else that is in the way.
Status clear_socket_path(const std::string& path, const sockaddr_un& addr) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) return Status::ok();
    return io_error("attach socket " + path + ": " + errno_text(errno));
  }
  if (!S_ISSOCK(st.st_mode)) {
    return failed_precondition("attach socket " + path +
                               " exists and is not a socket; refusing to replace it");
  }
  const int probe = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (probe < 0) return io_error("socket(): " + errno_text(errno));
  const int rc = ::connect(probe, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr));
  const int err = errno;
  ::close(probe);
  if (rc == 0) {
    return failed_precondition("attach socket " + path +
                               " is in use: another process listens on it");
  }
  if (err != ECONNREFUSED)
    return io_error("probing attach socket " + path + ": " + errno_text(err));
  if (::unlink(path.c_str()) != 0 && errno != ENOENT) {
    return io_error("removing stale attach socket " + path + ": " + errno_text(errno));
  }
  return Status::ok();
}

// A connection that has begun a message must finish it within this (a trainer's HELLO is one
// 28-byte write), so that a peer sending half a header cannot hold the wait.
constexpr auto kMessageCompletion = std::chrono::seconds(2);
// Connections waiting to say HELLO at once; beyond this the oldest is dropped.
constexpr std::size_t kMaxPending = 16;

// Milliseconds left until `deadline` for poll(), at least 0, at most a day (poll takes an int).
int poll_timeout_ms(Clock::time_point deadline) {
  const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return static_cast<int>(std::clamp<long long>(left, 0, 24LL * 3600 * 1000));
}

// Sends ERROR(code, text) best-effort (the peer may be gone or not read) and closes `fd`.
void refuse_connection(int fd, ErrorCode code, std::string_view text) {
  (void)attach::send_message(fd, attach::encode_error(code, text), -1,
                             Clock::now() + std::chrono::milliseconds(200));
  ::close(fd);
}

// The listening socket once a trainer is attached: every further connection (a second trainer, a
// health check, another gossipd's "in use?" probe) gets an ERROR and is closed, until `wake_fd`
// is signalled. Touches nothing but these two descriptors.
void refuse_newcomers(int listen_fd, int wake_fd, std::string path) {
  const std::string text =
      "a trainer is already attached to the gossipd serving " + path + " (one trainer per node)";
  for (;;) {
    pollfd fds[2] = {{listen_fd, POLLIN, 0}, {wake_fd, POLLIN, 0}};
    if (::poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      return;
    }
    if (fds[1].revents != 0) return;
    const int fd = ::accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) continue;
    refuse_connection(fd, ErrorCode::kRefused, text);
    GOSSIP_LOG(kWarning) << "attach socket " << path
                         << ": refused a second connection (a trainer is attached)";
  }
}

// What a connection waiting to be the trainer sent: a HELLO (or any message of another protocol
// version, whose HELLO this build cannot read: accept_hello refuses it with the reason), or why
// it is dropped — `quiet` when it just closed (a probe, a health check).
struct Heard {
  std::optional<attach::Message> hello;
  bool quiet = false;
  std::string what;
};

// Reads one message from `fd`, which poll() found readable; tells the sender of anything that is
// not a HELLO why it is dropped (ERROR, kProtocol).
Heard hear(int fd, Clock::time_point deadline) {
  auto m = attach::read_message(fd, std::min(deadline, Clock::now() + kMessageCompletion),
                                /*accept_fds=*/false);
  const auto tell = [fd](const std::string& text) {
    (void)attach::send_message(fd, attach::encode_error(ErrorCode::kProtocol, text), -1,
                               Clock::now() + std::chrono::milliseconds(200));
  };
  if (!m.is_ok()) {
    switch (m.status().code()) {
      case StatusCode::kUnavailable:
        return {{}, true, "closed before saying HELLO"};
      case StatusCode::kCorruption:
        tell("expected HELLO: got " + m.status().message());
        return {{}, false, "sent " + m.status().message()};
      default:
        return {{}, false, "began a message and did not finish it"};
    }
  }
  if (m->header.version != attach::kProtocolVersion ||
      (m->header.type == static_cast<std::uint16_t>(MessageType::kHello) &&
       m->payload.size() == attach::kHelloBytes)) {
    return {std::move(*m), false, ""};
  }
  tell("expected HELLO (" + std::to_string(attach::kHelloBytes) + " payload bytes), got " +
       attach::message_type_name(m->header.type) + " (" + std::to_string(m->payload.size()) +
       " bytes)");
  return {{}, false, "sent " + attach::message_type_name(m->header.type) + " instead of HELLO"};
}

}  // namespace

Result<std::unique_ptr<AttachServer>> AttachServer::listen(const std::string& socket_path) {
  GOSSIP_ASSIGN_OR_RETURN(const sockaddr_un addr, unix_address(socket_path));
  GOSSIP_RETURN_IF_ERROR(clear_socket_path(socket_path, addr));
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return io_error("socket(): " + errno_text(errno));
  if (::bind(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) != 0) {
    const int err = errno;
    ::close(fd);
    return io_error("binding attach socket " + socket_path + ": " + errno_text(err));
  }
  // Only this user's processes may attach: the trainer gets write access to what we gossip.
  if (::chmod(socket_path.c_str(), 0600) != 0 || ::listen(fd, 1) != 0) {
    const int err = errno;
    ::close(fd);
    ::unlink(socket_path.c_str());
    return io_error("listening on attach socket " + socket_path + ": " + errno_text(err));
  }
  return std::unique_ptr<AttachServer>(new AttachServer(socket_path, fd));
}

AttachServer::AttachServer(std::string socket_path, int listen_fd)
    : socket_path_(std::move(socket_path)), listen_fd_(listen_fd) {}

AttachServer::~AttachServer() {
  close_connection();
  stop_listening();
  if (mapping_ != nullptr) ::munmap(mapping_, mapping_bytes_);
  if (memfd_ >= 0) ::close(memfd_);
}

void AttachServer::stop_listening() {
  if (refuser_.joinable()) {
    const std::uint64_t one = 1;
    (void)!::write(wake_fd_, &one, sizeof one);
    refuser_.join();
  }
  if (wake_fd_ >= 0) ::close(wake_fd_);
  wake_fd_ = -1;
  if (listen_fd_ < 0) return;
  ::close(listen_fd_);
  listen_fd_ = -1;
  ::unlink(socket_path_.c_str());
}

void AttachServer::start_refusing() {
  wake_fd_ = ::eventfd(0, EFD_CLOEXEC);
  if (wake_fd_ < 0) {
    // Without a way to stop a refuser, stop listening instead: later connections then find no
    // socket, which refuses them too.
    stop_listening();
    return;
  }
  refuser_ = std::thread(refuse_newcomers, listen_fd_, wake_fd_, socket_path_);
}

Result<attach::Message> AttachServer::wait_for_hello(Clock::time_point deadline) {
  std::vector<int> pending;  // accepted, not yet heard from, oldest first
  int dropped = 0;
  auto drop = [&](std::size_t k, const Heard& why) {
    ::close(pending[k]);
    pending.erase(pending.begin() + static_cast<std::ptrdiff_t>(k));
    ++dropped;
    if (why.quiet) {
      GOSSIP_LOG(kInfo) << "attach socket " << socket_path_ << ": a connection " << why.what
                        << "; still waiting for a trainer's HELLO";
    } else {
      GOSSIP_LOG(kWarning) << "attach socket " << socket_path_ << ": dropped a connection that "
                           << why.what << "; still waiting for a trainer's HELLO";
    }
  };
  for (;;) {
    std::vector<pollfd> fds{{listen_fd_, POLLIN, 0}};
    for (int fd : pending) fds.push_back({fd, POLLIN, 0});
    const int n = ::poll(fds.data(), fds.size(), poll_timeout_ms(deadline));
    if ((n < 0 && errno != EINTR) || (n <= 0 && Clock::now() >= deadline)) {
      const int err = errno;
      for (int fd : pending) ::close(fd);
      if (n < 0 && err != EINTR) return io_error("poll(): " + errno_text(err));
      return deadline_exceeded("no trainer connected to " + socket_path_ + " in time" +
                               (dropped == 0 ? std::string()
                                             : " (" + std::to_string(dropped) +
                                                   " connection(s) closed or sent something else "
                                                   "than HELLO: see the log)"));
    }
    if (n <= 0) continue;
    // The waiting connections first (fds[1..]), newest first so that erasing keeps indices valid.
    for (std::size_t k = pending.size(); k-- > 0;) {
      if (fds[k + 1].revents == 0) continue;
      Heard heard = hear(pending[k], deadline);
      if (!heard.hello) {
        drop(k, heard);
        continue;
      }
      conn_fd_ = pending[k];
      pending.erase(pending.begin() + static_cast<std::ptrdiff_t>(k));
      for (int other : pending) {
        refuse_connection(other, ErrorCode::kRefused, "another trainer attached first");
      }
      return std::move(*heard.hello);
    }
    if (fds[0].revents & POLLIN) {
      for (int fd;
           (fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK)) >= 0;) {
        pending.push_back(fd);
        if (pending.size() > kMaxPending) drop(0, {{}, false, "waited while newer ones came"});
      }
    }
  }
}

void AttachServer::close_connection() {
  if (conn_fd_ >= 0) ::close(conn_fd_);
  conn_fd_ = -1;
  posted_.reset();
  updated_ = false;
}

Status AttachServer::refuse(ErrorCode code, Status status) {
  (void)send_bytes(attach::encode_error(code, status.message()));
  close_connection();
  return status;
}

void AttachServer::fail(std::string_view message) {
  if (conn_fd_ < 0) return;
  (void)send_bytes(attach::encode_error(ErrorCode::kAborted, message));
  close_connection();
}

Status AttachServer::close() {
  if (conn_fd_ < 0) return Status::ok();
  Status s = send_bytes(attach::encode_bye());
  close_connection();
  // A trainer that already left has nothing more to be told.
  return s.code() == StatusCode::kUnavailable ? Status::ok() : s;
}

Status AttachServer::send_bytes(std::string_view bytes, int fd_to_pass) {
  if (conn_fd_ < 0) return failed_precondition("no trainer is attached");
  // Messages are tiny and the trainer reads each before it sends the next, so the socket buffer
  // has room; the deadline only guards against a trainer that stopped reading.
  Status s = attach::send_message(conn_fd_, bytes, fd_to_pass, Clock::now() + kSendTimeout);
  if (s.code() == StatusCode::kUnavailable) {
    return unavailable("the trainer disconnected (" + s.message() + ")");
  }
  return s;
}

Result<attach::Message> AttachServer::read_message(Clock::time_point deadline,
                                                   std::string_view waiting_for) {
  // No descriptors accepted: any a trainer sends are closed by the kernel, never leaked here.
  auto m = attach::read_message(conn_fd_, deadline, /*accept_fds=*/false);
  if (m.is_ok()) return m;
  const Status& s = m.status();
  const std::string waited = " while the daemon waited for " + std::string(waiting_for);
  switch (s.code()) {
    case StatusCode::kCorruption:
      return refuse(ErrorCode::kProtocol, corruption("the trainer sent " + s.message() + waited));
    case StatusCode::kDeadlineExceeded: {
      const std::string text =
          "no " + std::string(waiting_for) + " from the trainer by the deadline";
      fail(text);
      return deadline_exceeded(text);
    }
    case StatusCode::kUnavailable:
      close_connection();
      return unavailable("the trainer disconnected (" + s.message() + ")" + waited);
    default:
      close_connection();
      return s.with_context("attach socket " + socket_path_);
  }
}

Status AttachServer::create_buffer(std::uint64_t num_params, attach::Welcome* welcome) {
  const std::uint64_t page = static_cast<std::uint64_t>(::sysconf(_SC_PAGESIZE));
  const std::uint64_t region = (num_params * sizeof(float) + page - 1) / page * page;
  const std::uint64_t bytes = with_update_ ? 2 * region : region;
  memfd_ = ::memfd_create("gossipd-attach", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (memfd_ < 0) return io_error("memfd_create(): " + errno_text(errno));
  if (::ftruncate(memfd_, static_cast<off_t>(bytes)) != 0) {
    return io_error("sizing the shared parameter buffer to " + std::to_string(bytes) +
                    " bytes: " + errno_text(errno));
  }
  // A trainer that shrank the file would make the daemon's next access a SIGBUS.
  if (::fcntl(memfd_, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0) {
    return io_error("sealing the shared parameter buffer: " + errno_text(errno));
  }
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, memfd_, 0);
  if (p == MAP_FAILED) return io_error("mapping the shared parameter buffer: " + errno_text(errno));
  mapping_ = p;
  mapping_bytes_ = bytes;
  params_ = std::span<float>(static_cast<float*>(p), num_params);
  welcome->buffer_bytes = bytes;
  welcome->params_offset = 0;
  if (with_update_) {
    update_ =
        std::span<float>(reinterpret_cast<float*>(static_cast<char*>(p) + region), num_params);
    welcome->update_offset = region;
  }
  return Status::ok();
}

Result<std::uint64_t> AttachServer::accept_hello(Clock::time_point deadline,
                                                 const AttachOptions& options) {
  if (accepted_) return failed_precondition("AttachServer::accept called twice");
  // Only a connection that says HELLO is the trainer: probes, health checks and garbage are
  // dropped without ending the wait.
  GOSSIP_ASSIGN_OR_RETURN(attach::Message m, wait_for_hello(deadline));
  accepted_ = true;
  start_refusing();  // one trainer per server: later connections are told so

  // wait_for_hello returns a HELLO of this version, or a message of another version.
  using attach::kProtocolVersion;
  if (m.header.version != kProtocolVersion) {
    return refuse(ErrorCode::kRefused,
                  invalid_argument("the trainer speaks attach protocol version " +
                                   std::to_string(m.header.version) + "; this gossipd speaks " +
                                   "version " + std::to_string(kProtocolVersion)));
  }
  const attach::Hello hello = attach::decode_hello(std::as_bytes(std::span(m.payload)));
  if ((hello.flags & ~attach::kHelloFlagsKnown) != 0) {
    return refuse(ErrorCode::kRefused,
                  invalid_argument("the trainer's HELLO sets flags " + std::to_string(hello.flags) +
                                   "; this gossipd knows " +
                                   std::to_string(attach::kHelloFlagsKnown) + " (update)"));
  }
  if (hello.dtype != static_cast<std::uint32_t>(attach::Dtype::kFloat32)) {
    return refuse(
        ErrorCode::kRefused,
        invalid_argument("the trainer announced dtype " + attach::dtype_name(hello.dtype) +
                         "; gossipd attach takes float32 parameters only"));
  }
  std::optional<std::uint64_t> expected = options.expected_num_params;
  if (!expected && !options.initial_parameters.empty())
    expected = options.initial_parameters.size();
  if (expected && hello.num_params != *expected) {
    return refuse(ErrorCode::kRefused,
                  invalid_argument("parameter count mismatch: the trainer announced " +
                                   std::to_string(hello.num_params) + " parameters, this node " +
                                   "trains " + std::to_string(*expected)));
  }
  if (hello.num_params == 0 || hello.num_params > options.max_num_params) {
    return refuse(ErrorCode::kRefused,
                  invalid_argument("the trainer announced " + std::to_string(hello.num_params) +
                                   " parameters; gossipd attach takes 1 to " +
                                   std::to_string(options.max_num_params)));
  }

  options_ = options;
  hello_num_params_ = hello.num_params;
  with_update_ = (hello.flags & attach::kHelloUpdate) != 0;
  return hello.num_params;
}

Status AttachServer::welcome(std::uint64_t start_iteration,
                             std::span<const float> initial_parameters) {
  if (conn_fd_ < 0 || hello_num_params_ == 0 || !params_.empty()) {
    return failed_precondition("AttachServer::welcome without a HELLO to answer");
  }
  if (!initial_parameters.empty() && initial_parameters.size() != hello_num_params_) {
    return refuse(
        ErrorCode::kAborted,
        invalid_argument("initial parameters: " + std::to_string(initial_parameters.size()) +
                         " floats for " + std::to_string(hello_num_params_) + " parameters"));
  }
  attach::Welcome w;
  if (Status s = create_buffer(hello_num_params_, &w); !s.is_ok()) {
    return refuse(ErrorCode::kAborted, s);
  }
  if (!initial_parameters.empty()) {
    std::copy(initial_parameters.begin(), initial_parameters.end(), params_.begin());
    w.flags |= attach::kFlagBufferInitialized;
  }
  w.num_params = hello_num_params_;
  w.start_iteration = start_iteration;
  w.node_id = options_.node_id;
  w.num_nodes = options_.num_nodes;
  w.local_steps = options_.local_steps;
  Status s = send_bytes(attach::encode_welcome(w), memfd_);
  if (!s.is_ok()) {
    close_connection();
    return s;
  }
  return Status::ok();
}

Result<std::uint64_t> AttachServer::accept(Clock::time_point deadline,
                                           const AttachOptions& options) {
  GOSSIP_ASSIGN_OR_RETURN(std::uint64_t n, accept_hello(deadline, options));
  if (Status s = welcome(options.start_iteration, options.initial_parameters); !s.is_ok()) return s;
  return n;
}

Result<attach::Message> AttachServer::read_expected(MessageType expected, std::size_t payload_bytes,
                                                    const std::string& what,
                                                    Clock::time_point deadline) {
  GOSSIP_ASSIGN_OR_RETURN(attach::Message m, read_message(deadline, what));
  const auto type = static_cast<MessageType>(m.header.type);
  if (type == MessageType::kError && m.payload.size() >= 4) {
    close_connection();
    return aborted("the trainer reported an error instead of " + what + ": " + m.payload.substr(4));
  }
  if (type == MessageType::kBye) {
    close_connection();
    return aborted("the trainer ended (BYE) instead of " + what);
  }
  if (m.header.version != attach::kProtocolVersion || type != expected ||
      m.payload.size() != payload_bytes) {
    return refuse(ErrorCode::kProtocol,
                  corruption("expected " + what + " from the trainer, got " +
                             attach::message_type_name(m.header.type) + " version " +
                             std::to_string(m.header.version) + " with " +
                             std::to_string(m.payload.size()) + " payload bytes"));
  }
  return m;
}

Result<std::span<float>> AttachServer::wait_post(std::uint64_t iteration,
                                                 Clock::time_point deadline) {
  if (conn_fd_ < 0) return failed_precondition("no trainer is attached");
  const std::string what = "POST(" + std::to_string(iteration) + ")";
  GOSSIP_ASSIGN_OR_RETURN(
      attach::Message m,
      read_expected(MessageType::kPost, attach::kIterationBytes, what, deadline));
  const std::uint64_t posted = get_u64(reinterpret_cast<const std::byte*>(m.payload.data()));
  if (posted != iteration) {
    return refuse(ErrorCode::kProtocol,
                  corruption("expected " + what + " from the trainer, got POST(" +
                             std::to_string(posted) + ")"));
  }
  posted_ = iteration;
  updated_ = false;
  return params_;
}

Result<float> AttachServer::wait_update(std::uint64_t iteration, Clock::time_point deadline) {
  if (conn_fd_ < 0) return failed_precondition("no trainer is attached");
  if (!with_update_ || posted_ != iteration || updated_) {
    return failed_precondition("wait_update(" + std::to_string(iteration) +
                               ") outside an update session's POST of that iteration");
  }
  const std::string what = "UPDATE(" + std::to_string(iteration) + ")";
  GOSSIP_ASSIGN_OR_RETURN(
      attach::Message m, read_expected(MessageType::kUpdate, attach::kUpdateBytes, what, deadline));
  const attach::Update u = attach::decode_update(std::as_bytes(std::span(m.payload)));
  if (u.iteration != iteration) {
    return refuse(ErrorCode::kProtocol,
                  corruption("expected " + what + " from the trainer, got UPDATE(" +
                             std::to_string(u.iteration) + ")"));
  }
  updated_ = true;
  return u.gamma;
}

Status AttachServer::reply_mixed(std::uint64_t iteration) {
  if (conn_fd_ < 0) return failed_precondition("no trainer is attached");
  if (posted_ != iteration || (with_update_ && !updated_)) {
    return failed_precondition("reply_mixed(" + std::to_string(iteration) +
                               ") without the trainer's POST (and UPDATE) of that iteration");
  }
  posted_.reset();
  updated_ = false;
  Status s = send_bytes(attach::encode_iteration(MessageType::kMixed, iteration));
  if (!s.is_ok()) close_connection();
  return s;
}

AttachSocketState probe_attach_socket(const std::string& socket_path,
                                      std::chrono::milliseconds wait) {
  Result<sockaddr_un> addr = unix_address(socket_path);
  if (!addr.is_ok()) return AttachSocketState::kNotServed;
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return AttachSocketState::kNotServed;
  // A non-blocking connect to a listening Unix socket completes at once (or EAGAIN when its
  // backlog is full: someone is serving it).
  const int rc = ::connect(fd, reinterpret_cast<const sockaddr*>(&*addr), sizeof(*addr));
  if (rc != 0 && errno != EAGAIN) {
    ::close(fd);
    return AttachSocketState::kNotServed;
  }
  auto reply = attach::read_message(fd, Clock::now() + wait, /*accept_fds=*/false);
  ::close(fd);
  if (reply.is_ok()) {
    return reply->header.type == static_cast<std::uint16_t>(MessageType::kError)
               ? AttachSocketState::kTrainerAttached
               : AttachSocketState::kNotServed;
  }
  return reply.status().code() == StatusCode::kDeadlineExceeded
             ? AttachSocketState::kWaitingForTrainer
             : AttachSocketState::kNotServed;
}

}  // namespace gossip::attach
