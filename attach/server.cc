// AttachServer (contract in attach.h). Plain POSIX sockets with poll() deadlines rather than Asio:
// there is one peer, one outstanding message at a time, and the caller is the loop's own thread,
// which blocks on the trainer anyway; an io_context would add a thread hand-off and nothing else.
#include "attach/server.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

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
  if (listen_fd_ < 0) return;
  ::close(listen_fd_);
  listen_fd_ = -1;
  ::unlink(socket_path_.c_str());
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
  const int r = attach::wait_fd(listen_fd_, POLLIN, deadline);
  if (r == 0) return deadline_exceeded("no trainer connected to " + socket_path_ + " in time");
  if (r < 0) return io_error("poll(): " + errno_text(errno));
  conn_fd_ = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
  if (conn_fd_ < 0) return io_error("accepting on " + socket_path_ + ": " + errno_text(errno));
  accepted_ = true;
  stop_listening();  // one trainer per server

  GOSSIP_ASSIGN_OR_RETURN(attach::Message m, read_message(deadline, "HELLO"));
  using attach::kProtocolVersion;
  if (m.header.version != kProtocolVersion) {
    return refuse(ErrorCode::kRefused,
                  invalid_argument("the trainer speaks attach protocol version " +
                                   std::to_string(m.header.version) + "; this gossipd speaks " +
                                   "version " + std::to_string(kProtocolVersion)));
  }
  if (m.header.type != static_cast<std::uint16_t>(MessageType::kHello) ||
      m.payload.size() != attach::kHelloBytes) {
    return refuse(ErrorCode::kProtocol,
                  corruption("expected HELLO (" + std::to_string(attach::kHelloBytes) +
                             " payload bytes) from the trainer, got " +
                             attach::message_type_name(m.header.type) + " (" +
                             std::to_string(m.payload.size()) + " bytes)"));
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

}  // namespace gossip::attach
