// Unit tests of AttachServer (attach/server.h) over a real Unix socket and a real memfd. The
// trainer side is written here with raw POSIX calls (connect, recvmsg + SCM_RIGHTS, mmap), in a
// thread or, where it must die, in a forked process killed with SIGKILL.
#include "attach/server.h"

#include <doctest/doctest.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "tests/attach/attach_test_support.h"

namespace gossip::attach {
namespace {

using namespace std::chrono_literals;
using attach::MessageType;
using Clock = std::chrono::steady_clock;

sockaddr_un address(const std::string& path) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, path.data(), path.size());
  return addr;
}

// The trainer's side of the protocol, blocking, with a receive timeout so that a failing test
// cannot hang.
class TestTrainer {
 public:
  ~TestTrainer() {
    if (mapping_ != nullptr) ::munmap(mapping_, welcome_.buffer_bytes);
    if (fd_ >= 0) ::close(fd_);
  }

  bool connect(const std::string& path) {
    fd_ = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    timeval tv{10, 0};
    ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    const sockaddr_un addr = address(path);
    return ::connect(fd_, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) == 0;
  }
  void send(const std::string& bytes) {
    REQUIRE(::send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL) ==
            static_cast<ssize_t>(bytes.size()));
  }
  void hello(std::uint64_t num_params, attach::Dtype dtype = attach::Dtype::kFloat32,
             std::uint16_t version = attach::kProtocolVersion, std::uint32_t flags = 0) {
    send(attach::encode_hello({num_params, static_cast<std::uint32_t>(dtype), flags}, version));
  }
  // Reads one message; the memfd of a WELCOME is kept in memfd_. Returns false on EOF/timeout.
  bool read(attach::Header* header, std::string* payload) {
    char head[attach::kHeaderBytes];
    iovec iov{head, sizeof(head)};
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof(control);
    if (::recvmsg(fd_, &msg, MSG_WAITALL | MSG_CMSG_CLOEXEC) != sizeof(head)) return false;
    for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
      if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
        std::memcpy(&memfd_, CMSG_DATA(c), sizeof(int));
      }
    }
    *header = attach::decode_header(std::as_bytes(std::span(head)));
    payload->assign(header->payload_bytes, '\0');
    return header->payload_bytes == 0 ||
           ::recv(fd_, payload->data(), payload->size(), MSG_WAITALL) ==
               static_cast<ssize_t>(payload->size());
  }
  // Reads WELCOME and maps the buffer.
  bool welcome() {
    attach::Header h;
    std::string payload;
    if (!read(&h, &payload) || h.type != static_cast<std::uint16_t>(MessageType::kWelcome)) {
      return false;
    }
    welcome_ = attach::decode_welcome(std::as_bytes(std::span(payload)));
    if (memfd_ < 0) return false;
    mapping_ =
        ::mmap(nullptr, welcome_.buffer_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, memfd_, 0);
    ::close(memfd_);
    if (mapping_ == MAP_FAILED) {
      mapping_ = nullptr;
      return false;
    }
    params_ = std::span<float>(static_cast<float*>(mapping_) + welcome_.params_offset / 4,
                               welcome_.num_params);
    if (welcome_.update_offset != 0) {
      update_ = std::span<float>(static_cast<float*>(mapping_) + welcome_.update_offset / 4,
                                 welcome_.num_params);
    }
    return true;
  }
  void post(std::uint64_t iteration) {
    send(attach::encode_iteration(MessageType::kPost, iteration));
  }
  // Reads the next message and returns its type; the iteration of a MIXED, the text of an ERROR.
  MessageType next(std::uint64_t* iteration = nullptr, std::string* text = nullptr,
                   std::uint32_t* code = nullptr) {
    attach::Header h;
    std::string payload;
    if (!read(&h, &payload)) return static_cast<MessageType>(0);
    const auto* p = reinterpret_cast<const std::byte*>(payload.data());
    if (iteration != nullptr && payload.size() == 8) *iteration = gossip::get_u64(p);
    if (h.type == static_cast<std::uint16_t>(MessageType::kError) && payload.size() >= 4) {
      if (code != nullptr) *code = gossip::get_u32(p);
      if (text != nullptr) *text = payload.substr(4);
    }
    return static_cast<MessageType>(h.type);
  }
  int fd() const { return fd_; }
  const attach::Welcome& info() const { return welcome_; }
  std::span<float> params() const { return params_; }
  std::span<float> update() const { return update_; }

 private:
  int fd_ = -1;
  int memfd_ = -1;
  attach::Welcome welcome_;
  void* mapping_ = nullptr;
  std::span<float> params_, update_;
};

// `trainer` connects to `server` at `socket` and says HELLO (8 floats) from a thread while the
// server accepts it; both sides' steps must succeed.
void handshake(AttachServer& server, TestTrainer& trainer, const std::string& socket) {
  std::thread t([&] {
    REQUIRE(trainer.connect(socket));
    trainer.hello(8);
    REQUIRE(trainer.welcome());
  });
  REQUIRE(server.accept(Clock::now() + 10s, {}).is_ok());
  t.join();
}

// A server listening in a scratch directory with a trainer attached by handshake().
struct Attached : Listening {
  TestTrainer trainer;
  Attached() { handshake(*server, trainer, dir.socket()); }
};

TEST_CASE("the HELLO bytes are the documented layout (docs/attach.md)") {
  const std::string hello = attach::encode_hello({0x0102030405ULL, 1, attach::kHelloUpdate});
  const unsigned char expected[] = {'G',  'S',  'A',  'T', 3, 0, 1, 0, 16, 0, 0, 0, 0x05, 0x04,
                                    0x03, 0x02, 0x01, 0,   0, 0, 1, 0, 0,  0, 1, 0, 0,    0};
  REQUIRE(hello.size() == sizeof(expected));
  CHECK(std::memcmp(hello.data(), expected, sizeof(expected)) == 0);
}

TEST_CASE_FIXTURE(
    Listening, "handshake: WELCOME carries the agreed fields and a memfd shared with the server") {
  struct stat st {};
  REQUIRE(::lstat(dir.socket().c_str(), &st) == 0);
  CHECK(S_ISSOCK(st.st_mode));
  CHECK((st.st_mode & 0777) == 0600);

  const std::uint64_t n = 1000;  // 4000 bytes: the buffer is rounded up to a page
  TestTrainer trainer;
  bool welcomed = false;
  std::thread t([&] {
    REQUIRE(trainer.connect(dir.socket()));
    trainer.hello(n);
    welcomed = trainer.welcome();
  });
  AttachOptions options;
  options.node_id = 3;
  options.num_nodes = 8;
  options.start_iteration = 17;
  options.local_steps = 50;
  auto accepted = server->accept(Clock::now() + 10s, options);
  t.join();
  REQUIRE_MESSAGE(accepted.is_ok(), accepted.status().to_string());
  CHECK(*accepted == n);
  REQUIRE(welcomed);
  CHECK(trainer.info().num_params == n);
  CHECK(trainer.info().dtype == 1);
  CHECK(trainer.info().flags == 0);
  CHECK(trainer.info().params_offset == 0);
  CHECK(trainer.info().buffer_bytes >= n * 4);
  CHECK(trainer.info().buffer_bytes % static_cast<std::uint64_t>(::sysconf(_SC_PAGESIZE)) == 0);
  CHECK(trainer.info().start_iteration == 17);
  CHECK(trainer.info().node_id == 3);
  CHECK(trainer.info().num_nodes == 8);
  CHECK(trainer.info().local_steps == 50);
  CHECK(server->num_params() == n);
  // The server keeps its socket (later connections are refused: see the probe tests).
  CHECK(::access(dir.socket().c_str(), F_OK) == 0);

  // The same memory on both sides.
  trainer.params()[0] = 1.5f;
  trainer.params()[n - 1] = -2.5f;
  CHECK(server->parameters()[0] == 1.5f);
  CHECK(server->parameters()[n - 1] == -2.5f);
  server->parameters()[7] = 42.0f;
  CHECK(trainer.params()[7] == 42.0f);
}

TEST_CASE_FIXTURE(
    Listening, "POST/MIXED round trip: the server reads x_t and the trainer reads what it wrote") {
  const std::uint64_t n = 4097;
  const std::uint64_t start = 5;
  const int iterations = 6;
  // Trainer: x_t[k] = t + k / n; expects back mixed[k] = 0.5 * x_t[k] + 0.5 * k (a fixed vector).
  int bad_values = 0;
  int bad_messages = 0;
  std::thread t([&] {
    TestTrainer trainer;
    REQUIRE(trainer.connect(dir.socket()));
    trainer.hello(n);
    REQUIRE(trainer.welcome());
    for (std::uint64_t it = start; it < start + iterations; ++it) {
      for (std::uint64_t k = 0; k < n; ++k) {
        trainer.params()[k] = static_cast<float>(it) + static_cast<float>(k) / n;
      }
      trainer.post(it);
      std::uint64_t mixed_it = 0;
      if (trainer.next(&mixed_it) != MessageType::kMixed || mixed_it != it) ++bad_messages;
      for (std::uint64_t k = 0; k < n; ++k) {
        const float x = static_cast<float>(it) + static_cast<float>(k) / n;
        if (trainer.params()[k] != 0.5f * x + 0.5f * static_cast<float>(k)) ++bad_values;
      }
    }
    if (trainer.next() != MessageType::kBye) ++bad_messages;
  });
  AttachOptions options;
  options.expected_num_params = n;
  options.start_iteration = start;
  REQUIRE(server->accept(Clock::now() + 10s, options).is_ok());
  for (std::uint64_t it = start; it < start + iterations; ++it) {
    auto x = server->wait_post(it, Clock::now() + 10s);
    REQUIRE_MESSAGE(x.is_ok(), x.status().to_string());
    REQUIRE(x->size() == n);
    int wrong = 0;
    for (std::uint64_t k = 0; k < n; ++k) {
      const float expected = static_cast<float>(it) + static_cast<float>(k) / n;
      if ((*x)[k] != expected) ++wrong;
      (*x)[k] = 0.5f * (*x)[k] + 0.5f * static_cast<float>(k);
    }
    CHECK(wrong == 0);
    REQUIRE(server->reply_mixed(it).is_ok());
  }
  CHECK(server->close().is_ok());
  t.join();
  CHECK(bad_values == 0);
  CHECK(bad_messages == 0);
  CHECK_FALSE(server->connected());
}

TEST_CASE_FIXTURE(
    Listening,
    "update session: a second page-aligned region carries u_t, UPDATE carries gamma, and the "
    "server's mix lands in the trainer's parameters") {
  const std::uint64_t n = 1500;  // 6000 bytes: each region is rounded up to whole pages
  const std::uint64_t page = static_cast<std::uint64_t>(::sysconf(_SC_PAGESIZE));
  attach::Welcome info;
  int bad_values = 0, bad_messages = 0;
  std::thread t([&] {
    TestTrainer trainer;
    REQUIRE(trainer.connect(dir.socket()));
    trainer.hello(n, attach::Dtype::kFloat32, attach::kProtocolVersion, attach::kHelloUpdate);
    REQUIRE(trainer.welcome());
    info = trainer.info();
    for (std::uint64_t k = 0; k < n; ++k) trainer.params()[k] = static_cast<float>(k);
    for (std::uint64_t it = 0; it < 3; ++it) {
      trainer.post(it);
      for (std::uint64_t k = 0; k < n; ++k) trainer.update()[k] = 1.0f;
      trainer.send(attach::encode_update({it, 0.25f}));
      std::uint64_t mixed_it = 99;
      if (trainer.next(&mixed_it) != MessageType::kMixed || mixed_it != it) ++bad_messages;
      for (std::uint64_t k = 0; k < n; ++k) {
        if (trainer.params()[k] != static_cast<float>(k) - 0.25f * static_cast<float>(it + 1)) {
          ++bad_values;
        }
      }
    }
    // UPDATE of another iteration: a protocol error.
    trainer.post(3);
    trainer.send(attach::encode_update({4, 0.25f}));
  });
  REQUIRE(server->accept(Clock::now() + 10s, {}).is_ok());
  CHECK(server->with_update());
  for (std::uint64_t it = 0; it < 3; ++it) {
    auto x = server->wait_post(it, Clock::now() + 10s);
    REQUIRE(x.is_ok());
    CHECK(server->reply_mixed(it).code() == StatusCode::kFailedPrecondition);  // no UPDATE yet
    Result<float> gamma = server->wait_update(it, Clock::now() + 10s);
    REQUIRE_MESSAGE(gamma.is_ok(), gamma.status().to_string());
    CHECK(*gamma == 0.25f);
    for (std::uint64_t k = 0; k < n; ++k) (*x)[k] -= *gamma * server->update()[k];
    REQUIRE(server->reply_mixed(it).is_ok());
  }
  REQUIRE(server->wait_post(3, Clock::now() + 10s).is_ok());
  Result<float> wrong = server->wait_update(3, Clock::now() + 10s);
  t.join();
  CHECK(info.params_offset == 0);
  CHECK(info.update_offset == 2 * page);
  CHECK(info.buffer_bytes == 4 * page);
  CHECK(server->update().size() == n);
  CHECK(bad_values == 0);
  CHECK(bad_messages == 0);
  CHECK(wrong.status().code() == StatusCode::kCorruption);
  CHECK(wrong.status().message().find("expected UPDATE(3)") != std::string::npos);
  CHECK(wrong.status().message().find("UPDATE(4)") != std::string::npos);
  CHECK_FALSE(server->connected());
}

TEST_CASE_FIXTURE(Attached,
                  "a plain session has no update region, and wait_update is refused there") {
  CHECK_FALSE(server->with_update());
  CHECK(trainer.info().update_offset == 0);
  CHECK(server->update().empty());
  trainer.post(0);
  REQUIRE(server->wait_post(0, Clock::now() + 10s).is_ok());
  CHECK(server->wait_update(0, Clock::now() + 1s).status().code() ==
        StatusCode::kFailedPrecondition);
}

// Runs accept() against a trainer that sends `hello_bytes`; returns the server's Status and the
// ERROR the trainer received.
struct Refusal {
  Status status;
  MessageType reply{};
  std::uint32_t code = 0;
  std::string text;
};
Refusal handshake_with(const std::string& hello_bytes, const AttachOptions& options) {
  SocketDir dir;
  auto server = listen_or_fail(dir.socket());
  Refusal r;
  std::thread t([&] {
    TestTrainer trainer;
    REQUIRE(trainer.connect(dir.socket()));
    trainer.send(hello_bytes);
    r.reply = trainer.next(nullptr, &r.text, &r.code);
  });
  auto accepted = server->accept(Clock::now() + 10s, options);
  t.join();
  r.status = accepted.status();
  CHECK_FALSE(server->connected());
  return r;
}

TEST_CASE("a parameter count other than the expected one is refused, naming both") {
  AttachOptions options;
  options.expected_num_params = 100;
  const Refusal r = handshake_with(attach::encode_hello({99, 1}), options);
  CHECK(r.status.code() == StatusCode::kInvalidArgument);
  CHECK(r.status.message().find("99") != std::string::npos);
  CHECK(r.status.message().find("100") != std::string::npos);
  CHECK(r.reply == MessageType::kError);
  CHECK(r.code == static_cast<std::uint32_t>(attach::ErrorCode::kRefused));
  CHECK(r.text == r.status.message());

  // Resuming: the initial parameters fix the count too.
  std::vector<float> initial(100, 1.0f);
  AttachOptions resume;
  resume.initial_parameters = initial;
  const Refusal r2 = handshake_with(attach::encode_hello({101, 1}), resume);
  CHECK(r2.status.code() == StatusCode::kInvalidArgument);
  CHECK(r2.text.find("101") != std::string::npos);
  CHECK(r2.text.find("100") != std::string::npos);
}

TEST_CASE("another protocol version is refused, naming both versions") {
  const Refusal r = handshake_with(attach::encode_hello({10, 1}, /*version=*/1), {});
  CHECK(r.status.code() == StatusCode::kInvalidArgument);
  CHECK(r.reply == MessageType::kError);
  CHECK(r.code == static_cast<std::uint32_t>(attach::ErrorCode::kRefused));
  CHECK(r.text.find("version 1;") != std::string::npos);
  CHECK(r.text.find("version " + std::to_string(attach::kProtocolVersion)) != std::string::npos);
}

TEST_CASE("HELLO flags this gossipd does not know are refused, naming them") {
  const Refusal r = handshake_with(attach::encode_hello({10, 1, 6}), {});
  CHECK(r.status.code() == StatusCode::kInvalidArgument);
  CHECK(r.code == static_cast<std::uint32_t>(attach::ErrorCode::kRefused));
  CHECK(r.text.find("flags 6") != std::string::npos);
}

TEST_CASE("a dtype other than float32 is refused by name, as are 0 parameters") {
  const Refusal bf16 = handshake_with(attach::encode_hello({10, 4}), {});
  CHECK(bf16.status.code() == StatusCode::kInvalidArgument);
  CHECK(bf16.text.find("bfloat16") != std::string::npos);
  CHECK(bf16.text.find("float32") != std::string::npos);

  const Refusal zero = handshake_with(attach::encode_hello({0, 1}), {});
  CHECK(zero.status.code() == StatusCode::kInvalidArgument);
}

TEST_CASE_FIXTURE(Listening, "initial parameters are copied into the buffer and flagged") {
  std::vector<float> initial = {1, 2, 3, 4, 5};
  TestTrainer trainer;
  bool welcomed = false;
  std::thread t([&] {
    REQUIRE(trainer.connect(dir.socket()));
    trainer.hello(5);
    welcomed = trainer.welcome();
  });
  AttachOptions options;
  options.initial_parameters = initial;
  REQUIRE(server->accept(Clock::now() + 10s, options).is_ok());
  t.join();
  REQUIRE(welcomed);
  CHECK(trainer.info().flags == attach::kFlagBufferInitialized);
  CHECK(std::vector<float>(trainer.params().begin(), trainer.params().end()) == initial);
}

// A trainer process that handshakes, posts `posts` iterations (answered), then posts one more and
// sleeps until killed.
pid_t fork_trainer(const std::string& path, int posts) {
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    TestTrainer trainer;
    if (!trainer.connect(path)) ::_exit(10);
    trainer.hello(64);
    if (!trainer.welcome()) ::_exit(11);
    for (int it = 0; it < posts; ++it) {
      trainer.post(static_cast<std::uint64_t>(it));
      if (trainer.next() != MessageType::kMixed) ::_exit(12);
    }
    trainer.post(static_cast<std::uint64_t>(posts));
    for (;;) ::pause();
  }
  return pid;
}

TEST_CASE_FIXTURE(
    Listening,
    "a trainer killed mid-iteration is reported as Unavailable, long before the deadline") {
  const pid_t pid = fork_trainer(dir.socket(), 2);
  REQUIRE(server->accept(Clock::now() + 10s, {}).is_ok());
  for (std::uint64_t it = 0; it < 2; ++it) {
    REQUIRE(server->wait_post(it, Clock::now() + 10s).is_ok());
    REQUIRE(server->reply_mixed(it).is_ok());
  }
  REQUIRE(server->wait_post(2, Clock::now() + 10s).is_ok());
  // The trainer dies while the daemon mixes iteration 2.
  ::kill(pid, SIGKILL);
  int wstatus = 0;
  ::waitpid(pid, &wstatus, 0);
  CHECK(WIFSIGNALED(wstatus));
  const Status replied = server->reply_mixed(2);
  CHECK(replied.code() == StatusCode::kUnavailable);
  CHECK_FALSE(server->connected());
  CHECK(server->wait_post(3, Clock::now() + 10s).status().code() ==
        StatusCode::kFailedPrecondition);
}

TEST_CASE_FIXTURE(Listening,
                  "a trainer killed while the server waits for its POST ends the wait at once") {
  const pid_t pid = fork_trainer(dir.socket(), 1);
  REQUIRE(server->accept(Clock::now() + 10s, {}).is_ok());
  REQUIRE(server->wait_post(0, Clock::now() + 10s).is_ok());
  REQUIRE(server->reply_mixed(0).is_ok());
  REQUIRE(server->wait_post(1, Clock::now() + 10s).is_ok());
  REQUIRE(server->reply_mixed(1).is_ok());  // the child posted 1 and sleeps without reading
  std::thread killer([pid] {
    std::this_thread::sleep_for(200ms);
    ::kill(pid, SIGKILL);
  });
  const auto begin = Clock::now();
  auto posted = server->wait_post(2, begin + 60s);
  killer.join();
  ::waitpid(pid, nullptr, 0);
  CHECK(posted.status().code() == StatusCode::kUnavailable);
  CHECK(posted.status().message().find("POST(2)") != std::string::npos);
  CHECK(Clock::now() - begin < 30s);
}

TEST_CASE_FIXTURE(Listening, "a silent trainer: wait_post and accept return at their deadline") {
  auto early = server->accept(Clock::now() + 100ms, {});
  CHECK(early.status().code() == StatusCode::kDeadlineExceeded);
  // Nobody connected, so the server still listens and accept may be called again.
  TestTrainer trainer;
  handshake(*server, trainer, dir.socket());
  const auto begin = Clock::now();
  auto posted = server->wait_post(0, begin + 300ms);
  const auto waited = Clock::now() - begin;
  CHECK(posted.status().code() == StatusCode::kDeadlineExceeded);
  CHECK(waited >= 300ms);
  CHECK(waited < 5s);
  // The trainer is told why.
  std::string text;
  CHECK(trainer.next(nullptr, &text) == MessageType::kError);
  CHECK(text.find("POST(0)") != std::string::npos);
}

TEST_CASE("protocol violations after the handshake: wrong iteration, BYE, ERROR") {
  for (int variant = 0; variant < 3; ++variant) {
    CAPTURE(variant);
    SocketDir dir;
    auto server = listen_or_fail(dir.socket());
    TestTrainer trainer;
    std::thread t([&] {
      REQUIRE(trainer.connect(dir.socket()));
      trainer.hello(8);
      REQUIRE(trainer.welcome());
      if (variant == 0) trainer.post(7);
      if (variant == 1) trainer.send(attach::encode_bye());
      if (variant == 2) trainer.send(attach::encode_error(attach::ErrorCode::kAborted, "CUDA OOM"));
    });
    REQUIRE(server->accept(Clock::now() + 10s, {}).is_ok());
    t.join();
    auto posted = server->wait_post(0, Clock::now() + 10s);
    const StatusCode expected[] = {StatusCode::kCorruption, StatusCode::kAborted,
                                   StatusCode::kAborted};
    CHECK(posted.status().code() == expected[variant]);
    if (variant == 0) CHECK(posted.status().message().find("POST(7)") != std::string::npos);
    if (variant == 2) CHECK(posted.status().message().find("CUDA OOM") != std::string::npos);
    CHECK_FALSE(server->connected());
  }
}

TEST_CASE_FIXTURE(Attached, "fail() tells the trainer why with an ERROR") {
  server->fail("neighbour 2 missed its deadline; leaving the group");
  std::string text;
  std::uint32_t code = 0;
  CHECK(trainer.next(nullptr, &text, &code) == MessageType::kError);
  CHECK(code == static_cast<std::uint32_t>(attach::ErrorCode::kAborted));
  CHECK(text == "neighbour 2 missed its deadline; leaving the group");
  CHECK(trainer.next() == static_cast<MessageType>(0));  // then EOF
}

// A raw connection to `path`, or -1.
int raw_connect(const std::string& path) {
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  timeval tv{10, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  const sockaddr_un addr = address(path);
  if (::connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

// The reply on `fd` to what was sent: (type, error code, text); type 0 on EOF or timeout.
struct Reply {
  std::uint16_t type = 0;
  std::uint32_t code = 0;
  std::string text;
};
Reply read_reply(int fd) {
  Reply r;
  char head[attach::kHeaderBytes];
  if (::recv(fd, head, sizeof head, MSG_WAITALL) != sizeof head) return r;
  const attach::Header h = attach::decode_header(std::as_bytes(std::span(head)));
  std::string payload(h.payload_bytes, '\0');
  if (h.payload_bytes > 0 && ::recv(fd, payload.data(), payload.size(), MSG_WAITALL) !=
                                 static_cast<ssize_t>(h.payload_bytes))
    return r;
  r.type = h.type;
  if (payload.size() >= 4) {
    r.code = gossip::get_u32(reinterpret_cast<const std::byte*>(payload.data()));
    r.text = payload.substr(4);
  }
  return r;
}

TEST_CASE_FIXTURE(
    Listening,
    "probes, health checks and garbage do not take the trainer's place: the wait goes on and the "
    "connection that says HELLO is the trainer") {
  Reply garbage, wrong_type, silent;
  bool second_server_refused = false, trained = false;
  std::thread others([&] {
    // Another gossipd on the same path: refused as "in use" (its probe connects and closes).
    auto second = AttachServer::listen(dir.socket());
    second_server_refused =
        !second.is_ok() && second.status().message().find("in use") != std::string::npos;
    // `nc -U` that closes at once.
    ::close(raw_connect(dir.socket()));
    // Bytes that are no attach message at all.
    const int g = raw_connect(dir.socket());
    const std::string http = "GET / HTTP/1.1\r\n\r\n";
    REQUIRE(::send(g, http.data(), http.size(), MSG_NOSIGNAL) > 0);
    garbage = read_reply(g);
    ::close(g);
    // An attach message that is not HELLO.
    const int w = raw_connect(dir.socket());
    const std::string post = attach::encode_iteration(MessageType::kPost, 0);
    REQUIRE(::send(w, post.data(), post.size(), MSG_NOSIGNAL) > 0);
    wrong_type = read_reply(w);
    ::close(w);
    // Half a header, never finished; and a connection that says nothing while the trainer comes.
    const int half = raw_connect(dir.socket());
    REQUIRE(::send(half, post.data(), 6, MSG_NOSIGNAL) == 6);
    const int quiet = raw_connect(dir.socket());
    std::this_thread::sleep_for(300ms);
    TestTrainer trainer;
    REQUIRE(trainer.connect(dir.socket()));
    trainer.hello(8);
    REQUIRE(trainer.welcome());
    silent = read_reply(quiet);  // told, once the trainer attached
    ::close(quiet);
    ::close(half);
    trainer.post(0);
    std::uint64_t it = 99;
    trained = trainer.next(&it) == MessageType::kMixed && it == 0;
  });
  const auto begin = Clock::now();
  auto accepted = server->accept(begin + 20s, {});
  REQUIRE_MESSAGE(accepted.is_ok(), accepted.status().to_string());
  CHECK(*accepted == 8);
  REQUIRE(server->wait_post(0, Clock::now() + 10s).is_ok());
  REQUIRE(server->reply_mixed(0).is_ok());
  others.join();
  CHECK(second_server_refused);
  CHECK(garbage.type == static_cast<std::uint16_t>(MessageType::kError));
  CHECK(garbage.code == static_cast<std::uint32_t>(attach::ErrorCode::kProtocol));
  CHECK(garbage.text.find("without the attach magic") != std::string::npos);
  CHECK(wrong_type.type == static_cast<std::uint16_t>(MessageType::kError));
  CHECK(wrong_type.text.find("got POST") != std::string::npos);
  CHECK(silent.type == static_cast<std::uint16_t>(MessageType::kError));
  CHECK(silent.code == static_cast<std::uint32_t>(attach::ErrorCode::kRefused));
  CHECK(trained);
  CHECK(Clock::now() - begin < 15s);
}

TEST_CASE_FIXTURE(Listening,
                  "connections that never say HELLO end the wait only at its deadline, saying so") {
  ::close(raw_connect(dir.socket()));
  const int g = raw_connect(dir.socket());
  REQUIRE(::send(g, "xxxxxxxxxxxxxxxx", 16, MSG_NOSIGNAL) == 16);
  const auto begin = Clock::now();
  auto accepted = server->accept(begin + 500ms, {});
  CHECK(Clock::now() - begin >= 500ms);
  CHECK(accepted.status().code() == StatusCode::kDeadlineExceeded);
  CHECK(accepted.status().message().find("2 connection(s) closed or sent something else") !=
        std::string::npos);
  CHECK(read_reply(g).code == static_cast<std::uint32_t>(attach::ErrorCode::kProtocol));
  ::close(g);
  // Nobody took the place: a trainer may still attach.
  TestTrainer trainer;
  handshake(*server, trainer, dir.socket());
}

TEST_CASE_FIXTURE(
    Attached,
    "after the HELLO every further connection gets an ERROR and is closed, the session goes on "
    "undisturbed and another gossipd is refused the path") {
  for (int k = 0; k < 3; ++k) {
    // A second trainer (its HELLO may be cut short by the refusal: the ERROR is sent at once).
    const int second = raw_connect(dir.socket());
    REQUIRE(second >= 0);
    const std::string hello = attach::encode_hello({8, 1, 0});
    (void)::send(second, hello.data(), hello.size(), MSG_NOSIGNAL);
    const Reply r = read_reply(second);
    CHECK(r.type == static_cast<std::uint16_t>(MessageType::kError));
    CHECK(r.code == static_cast<std::uint32_t>(attach::ErrorCode::kRefused));
    CHECK(r.text.find("a trainer is already attached to the gossipd serving " + dir.socket()) !=
          std::string::npos);
    char byte;
    CHECK(::recv(second, &byte, 1, 0) <= 0);  // then closed
    ::close(second);
    auto other = AttachServer::listen(dir.socket());
    CHECK(other.status().message().find("in use") != std::string::npos);
    // The attached trainer's iteration k is undisturbed.
    trainer.post(static_cast<std::uint64_t>(k));
    auto x = server->wait_post(static_cast<std::uint64_t>(k), Clock::now() + 10s);
    REQUIRE_MESSAGE(x.is_ok(), x.status().to_string());
    REQUIRE(server->reply_mixed(static_cast<std::uint64_t>(k)).is_ok());
    std::uint64_t it = 99;
    CHECK(trainer.next(&it) == MessageType::kMixed);
    CHECK(it == static_cast<std::uint64_t>(k));
  }
  CHECK(server->close().is_ok());
  server.reset();
  CHECK(::access(dir.socket().c_str(), F_OK) != 0);  // unlinked when the server is destroyed
}

TEST_CASE("a supervisor's probe tells not served, waiting for the trainer and attached apart") {
  SocketDir dir;
  CHECK(probe_attach_socket(dir.socket(), 300ms) == AttachSocketState::kNotServed);
  auto server = listen_or_fail(dir.socket());
  CHECK(probe_attach_socket(dir.socket(), 300ms) == AttachSocketState::kWaitingForTrainer);
  // The server keeps waiting after the probe: a trainer still attaches.
  TestTrainer trainer;
  handshake(*server, trainer, dir.socket());
  CHECK(probe_attach_socket(dir.socket(), 5s) == AttachSocketState::kTrainerAttached);
  server.reset();
  CHECK(probe_attach_socket(dir.socket(), 300ms) == AttachSocketState::kNotServed);
}

TEST_CASE("socket path rules: not a socket, stale socket, socket in use, too long") {
  SocketDir dir;
  const std::string path = dir.socket();
  {
    std::ofstream(path) << "keep me";
    auto refused = AttachServer::listen(path);
    CHECK(refused.status().code() == StatusCode::kFailedPrecondition);
    CHECK(refused.status().message().find("not a socket") != std::string::npos);
    std::ifstream in(path);
    std::string content;
    std::getline(in, content);
    CHECK(content == "keep me");
    ::unlink(path.c_str());
  }
  {
    // A socket file left behind by a process that died: nobody listens on it.
    const int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
    const sockaddr_un addr = address(path);
    REQUIRE(::bind(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) == 0);
    ::close(fd);
    auto server = AttachServer::listen(path);
    CHECK_MESSAGE(server.is_ok(), server.status().to_string());
    // While it listens, a second server is refused and the socket stays.
    auto second = AttachServer::listen(path);
    CHECK(second.status().code() == StatusCode::kFailedPrecondition);
    CHECK(second.status().message().find("in use") != std::string::npos);
  }
  CHECK(::access(path.c_str(), F_OK) != 0);  // the destructor unlinked it
  auto too_long = AttachServer::listen("/tmp/" + std::string(200, 'x'));
  CHECK(too_long.status().code() == StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace gossip::attach
