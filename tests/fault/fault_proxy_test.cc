// gossip-faultproxy end to end, with real sockets on loopback: a real proxy process between a
// test client and an echo server of this test, driven through its control socket by the real
// `gossip-faultproxy ctl` client. Proves that
//  - delay with jitter holds every byte at least delay - jitter, varies per chunk, and keeps
//    the byte stream intact and in order; a delay on one direction only affects that direction;
//  - a blackhole forwards nothing but keeps the connection open, and bytes sent during it are lost;
//  - pause holds bytes and delivers them intact afterwards;
//  - cut resets every open connection; `refuse on` keeps new ones out until `refuse off`;
//  - bad commands get an error reply and the proxy carries on; a dead target resets the client.
// Assertions on time are lower bounds (what the proxy guarantees) plus generous upper bounds, so
// a loaded machine cannot make them fail spuriously.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <mutex>

#include "tests/fault/fault_test_util.h"

namespace gossip::fault_testing {
namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

int listen_loopback(int port = 0) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(fd >= 0);
  int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<std::uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
  REQUIRE(::listen(fd, 16) == 0);
  return fd;
}

int port_of(int fd) {
  sockaddr_in a{};
  socklen_t len = sizeof a;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  return ntohs(a.sin_port);
}

int connect_loopback(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(fd >= 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<std::uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  return fd;
}

void send_all(int fd, const std::string& bytes) {
  std::size_t sent = 0;
  while (sent < bytes.size()) {
    const ssize_t n = ::send(fd, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
    REQUIRE(n > 0);
    sent += static_cast<std::size_t>(n);
  }
}

// What a read within `ms` saw: bytes, end of stream (FIN or RST), or nothing.
struct ReadResult {
  std::string bytes;
  bool closed = false;
};

// Reads until `want` bytes arrived, the peer closed, or `ms` passed.
ReadResult read_for(int fd, std::size_t want, int ms) {
  ReadResult r;
  const auto end = Clock::now() + std::chrono::milliseconds(ms);
  while (r.bytes.size() < want) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(end - Clock::now()).count();
    if (left <= 0) break;
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(left)) <= 0) continue;
    char buf[4096];
    const ssize_t n = ::recv(fd, buf, std::min(sizeof buf, want - r.bytes.size()), 0);
    if (n <= 0) {
      r.closed = true;
      break;
    }
    r.bytes.append(buf, static_cast<std::size_t>(n));
  }
  return r;
}

// Echoes every byte back on each accepted connection; stops (and joins) at destruction.
class EchoServer {
 public:
  EchoServer() : fd_(listen_loopback()), port_(port_of(fd_)) {
    thread_ = std::thread([this] { loop(); });
  }
  ~EchoServer() {
    stop_ = true;
    thread_.join();
    ::close(fd_);
  }
  int port() const { return port_; }
  int accepted() const { return accepted_; }

 private:
  void loop() {
    std::vector<int> conns;
    while (!stop_) {
      std::vector<pollfd> fds{{fd_, POLLIN, 0}};
      for (int c : conns) fds.push_back({c, POLLIN, 0});
      if (::poll(fds.data(), fds.size(), 20) <= 0) continue;
      if (fds[0].revents & POLLIN) {
        const int c = ::accept(fd_, nullptr, nullptr);
        if (c >= 0) {
          conns.push_back(c);
          ++accepted_;
        }
      }
      for (std::size_t k = 1; k < fds.size(); ++k) {
        if (!(fds[k].revents & (POLLIN | POLLHUP | POLLERR))) continue;
        char buf[4096];
        const ssize_t n = ::recv(fds[k].fd, buf, sizeof buf, 0);
        if (n <= 0) {
          ::close(fds[k].fd);
          conns.erase(std::find(conns.begin(), conns.end(), fds[k].fd));
          continue;
        }
        ssize_t off = 0;
        while (off < n) {
          const ssize_t w =
              ::send(fds[k].fd, buf + off, static_cast<std::size_t>(n - off), MSG_NOSIGNAL);
          if (w <= 0) break;
          off += w;
        }
      }
    }
    for (int c : conns) ::close(c);
  }

  int fd_;
  int port_;
  std::atomic<bool> stop_{false};
  std::atomic<int> accepted_{0};
  std::thread thread_;
};

// A gossip-faultproxy child in front of `target_port`; killed (SIGTERM, then SIGKILL) at scope
// exit.
class ProxyProcess {
 public:
  explicit ProxyProcess(int target_port, std::vector<std::string> extra = {}) {
    int pipe_fds[2];
    REQUIRE(::pipe(pipe_fds) == 0);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, pipe_fds[1], 1);
    posix_spawn_file_actions_addclose(&fa, pipe_fds[0]);
    std::vector<std::string> argv = {
        binary("tests/fault/gossip-faultproxy"),    "--listen",  "127.0.0.1:0", "--target",
        "127.0.0.1:" + std::to_string(target_port), "--control", "127.0.0.1:0"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    std::vector<char*> args;
    for (auto& a : argv) args.push_back(a.data());
    args.push_back(nullptr);
    REQUIRE(::posix_spawn(&pid_, argv[0].c_str(), &fa, nullptr, args.data(), environ) == 0);
    posix_spawn_file_actions_destroy(&fa);
    ::close(pipe_fds[1]);
    // "listening 127.0.0.1:P control 127.0.0.1:C"
    std::string line;
    const auto end = Clock::now() + std::chrono::seconds(10);
    while (line.find('\n') == std::string::npos && Clock::now() < end) {
      pollfd p{pipe_fds[0], POLLIN, 0};
      if (::poll(&p, 1, 100) <= 0) continue;
      char c[256];
      const ssize_t n = ::read(pipe_fds[0], c, sizeof c);
      if (n <= 0) break;
      line.append(c, static_cast<std::size_t>(n));
    }
    ::close(pipe_fds[0]);
    std::istringstream in(line);
    std::string w1, listen, w2, control;
    in >> w1 >> listen >> w2 >> control;
    REQUIRE_MESSAGE(w1 == "listening", "proxy start line: '", line, "'");
    REQUIRE(w2 == "control");
    port_ = std::stoi(listen.substr(listen.rfind(':') + 1));
    control_ = control;
  }
  ~ProxyProcess() {
    ::kill(pid_, SIGTERM);
    int status = 0;
    for (int i = 0; i < 200; ++i) {
      if (::waitpid(pid_, &status, WNOHANG) == pid_) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, &status, 0);
  }
  int port() const { return port_; }
  // Sends one control command through `gossip-faultproxy ctl`; returns the reply line.
  std::string ctl(const std::string& command) const {
    std::vector<std::string> argv = {binary("tests/fault/gossip-faultproxy"), "ctl", control_};
    std::istringstream in(command);
    for (std::string w; in >> w;) argv.push_back(w);
    ProcessResult r = run_process(argv, 10);
    return r.out.empty() ? r.err : r.out.substr(0, r.out.find('\n'));
  }
  // One value of the `stats` reply, e.g. stat("dropped_c2s").
  std::uint64_t stat(const std::string& key) const {
    const std::string s = ctl("stats");
    const auto at = s.find(" " + key + "=");
    REQUIRE_MESSAGE(at != std::string::npos, key, " missing in '", s, "'");
    return std::stoull(s.substr(at + key.size() + 2));
  }

 private:
  pid_t pid_ = -1;
  int port_ = 0;
  std::string control_;
};

// A 16-byte message: sequence number and a marker, so order and integrity can be checked.
std::string message(std::uint32_t seq) {
  char m[32];
  std::snprintf(m, sizeof m, "msg%08u....\n", seq % 100000000u);
  return m;
}

struct DelayStats {
  double min_ms = 1e9, max_ms = 0, mean_ms = 0;
};

// Sends `count` messages `gap_ms` apart through the proxy to the echo server and times each echo.
DelayStats measure_round_trips(int fd, int count, int gap_ms) {
  std::vector<Clock::time_point> sent(static_cast<std::size_t>(count));
  std::vector<double> rtt(static_cast<std::size_t>(count), -1.0);
  std::mutex mu;
  std::string received;
  std::thread reader([&] {
    std::size_t next = 0;
    const auto end = Clock::now() + std::chrono::seconds(20);
    while (next < rtt.size() && Clock::now() < end) {
      ReadResult r = read_for(fd, 16, 100);
      if (r.closed) break;
      std::lock_guard l(mu);
      received += r.bytes;
      while (received.size() >= 16 * (next + 1)) rtt[next] = ms_since(sent[next]), ++next;
    }
  });
  for (int k = 0; k < count; ++k) {
    {
      std::lock_guard l(mu);
      sent[static_cast<std::size_t>(k)] = Clock::now();
    }
    send_all(fd, message(static_cast<std::uint32_t>(k)));
    std::this_thread::sleep_for(std::chrono::milliseconds(gap_ms));
  }
  reader.join();
  std::string expected;
  for (int k = 0; k < count; ++k) expected += message(static_cast<std::uint32_t>(k));
  REQUIRE_MESSAGE(received == expected, "the byte stream was damaged or reordered");
  DelayStats s;
  for (double r : rtt) {
    s.min_ms = std::min(s.min_ms, r);
    s.max_ms = std::max(s.max_ms, r);
    s.mean_ms += r / count;
  }
  return s;
}

TEST_CASE("delay 100 ms +- 50 ms: every byte arrives in order, held at least 50 ms, jittered") {
  EchoServer echo;
  ProxyProcess proxy(echo.port(), {"--seed", "7"});
  const int fd = connect_loopback(proxy.port());

  const DelayStats undisturbed = measure_round_trips(fd, 20, 2);
  CHECK(undisturbed.min_ms < 50.0);

  REQUIRE(proxy.ctl("delay c2s 100 50") == "ok delay c2s 100 50");
  const DelayStats d = measure_round_trips(fd, 120, 5);
  MESSAGE("c2s 100+-50 ms: min ", d.min_ms, " mean ", d.mean_ms, " max ", d.max_ms, " ms");
  CHECK(d.min_ms >= 50.0);
  CHECK(d.mean_ms >= 75.0);
  CHECK(d.max_ms - d.min_ms >= 20.0);  // jitter, not a constant delay
  CHECK(d.max_ms < 150.0 + 500.0);     // order-preserving jitter never adds more than jitter

  // The other direction only.
  REQUIRE(proxy.ctl("delay c2s 0") == "ok delay c2s 0 0");
  REQUIRE(proxy.ctl("delay s2c 80") == "ok delay s2c 80 0");
  const DelayStats s2c = measure_round_trips(fd, 20, 5);
  CHECK(s2c.min_ms >= 80.0);
  CHECK(s2c.max_ms < 80.0 + 500.0);

  REQUIRE(proxy.ctl("reset") == "ok reset");
  const DelayStats after = measure_round_trips(fd, 20, 2);
  CHECK(after.min_ms < 50.0);
  ::close(fd);
}

TEST_CASE(
    "blackhole: nothing is forwarded, the connection stays open, bytes sent meanwhile are lost") {
  EchoServer echo;
  ProxyProcess proxy(echo.port());
  const int fd = connect_loopback(proxy.port());
  send_all(fd, "hello");
  CHECK(read_for(fd, 5, 5000).bytes == "hello");

  REQUIRE(proxy.ctl("blackhole c2s on") == "ok blackhole c2s on");
  send_all(fd, "lost-bytes");
  const ReadResult during = read_for(fd, 1, 400);
  CHECK(during.bytes.empty());
  CHECK_FALSE(during.closed);
  CHECK(proxy.stat("dropped_c2s") == 10);
  CHECK(proxy.stat("connections") == 1);

  REQUIRE(proxy.ctl("blackhole c2s off") == "ok blackhole c2s off");
  send_all(fd, "back");
  CHECK(read_for(fd, 4, 5000).bytes == "back");  // not "lost-bytes"

  // A blackhole on the return path swallows the echo instead.
  REQUIRE(proxy.ctl("blackhole s2c on") == "ok blackhole s2c on");
  send_all(fd, "echo-lost");
  CHECK(read_for(fd, 1, 400).bytes.empty());
  CHECK(proxy.stat("dropped_s2c") == 9);
  ::close(fd);
}

TEST_CASE("pause holds bytes without losing them and resume delivers them intact") {
  EchoServer echo;
  ProxyProcess proxy(echo.port());
  const int fd = connect_loopback(proxy.port());
  REQUIRE(proxy.ctl("pause c2s on") == "ok pause c2s on");
  std::string payload;
  for (int k = 0; k < 200; ++k) payload += message(static_cast<std::uint32_t>(k));
  send_all(fd, payload);
  const ReadResult during = read_for(fd, 1, 400);
  CHECK(during.bytes.empty());
  CHECK_FALSE(during.closed);
  REQUIRE(proxy.ctl("pause c2s off") == "ok pause c2s off");
  CHECK(read_for(fd, payload.size(), 5000).bytes == payload);
  ::close(fd);
}

TEST_CASE("cut resets every open connection and refuse keeps new ones out until turned off") {
  EchoServer echo;
  ProxyProcess proxy(echo.port());
  const int a = connect_loopback(proxy.port());
  const int b = connect_loopback(proxy.port());
  send_all(a, "a");
  send_all(b, "b");
  REQUIRE(read_for(a, 1, 5000).bytes == "a");
  REQUIRE(read_for(b, 1, 5000).bytes == "b");

  CHECK(proxy.ctl("cut") == "ok cut 2");
  CHECK(read_for(a, 1, 3000).closed);
  CHECK(read_for(b, 1, 3000).closed);
  ::close(a);
  ::close(b);

  REQUIRE(proxy.ctl("refuse on") == "ok refuse on");
  const int c = connect_loopback(proxy.port());  // the kernel accepts; the proxy resets it
  CHECK(read_for(c, 1, 3000).closed);
  ::close(c);
  CHECK(proxy.stat("refused") == 1);

  REQUIRE(proxy.ctl("refuse off") == "ok refuse off");
  const int d = connect_loopback(proxy.port());
  send_all(d, "again");
  CHECK(read_for(d, 5, 5000).bytes == "again");
  ::close(d);
  CHECK(proxy.stat("cut") == 2);
}

TEST_CASE("bad control commands get an error reply and the proxy keeps forwarding") {
  EchoServer echo;
  ProxyProcess proxy(echo.port());
  for (const char* bad : {"frobnicate", "delay up 5", "delay both 10 20", "delay both 1x",
                          "blackhole both maybe", "cut now", "refuse"}) {
    CAPTURE(bad);
    CHECK(proxy.ctl(bad).rfind("error: ", 0) == 0);
  }
  const int fd = connect_loopback(proxy.port());
  send_all(fd, "still here");
  CHECK(read_for(fd, 10, 5000).bytes == "still here");
  ::close(fd);
}

TEST_CASE("a target that is down resets the client instead of leaving it hanging") {
  const int dead = listen_loopback();
  const int dead_port = port_of(dead);
  ::close(dead);  // nobody listens there now
  ProxyProcess proxy(dead_port);
  const int fd = connect_loopback(proxy.port());
  CHECK(read_for(fd, 1, 3000).closed);
  ::close(fd);
}

TEST_CASE("the proxy refuses malformed command lines with a message on stderr") {
  const ProcessResult no_target = run_process({binary("tests/fault/gossip-faultproxy")});
  CHECK(no_target.code == 2);
  CHECK(contains(no_target.err, "--target"));
  const ProcessResult bad_jitter =
      run_process({binary("tests/fault/gossip-faultproxy"), "--target", "127.0.0.1:1", "--delay-ms",
                   "10", "--jitter-ms", "20"});
  CHECK(bad_jitter.code == 2);
  CHECK(contains(bad_jitter.err, "jitter"));
  const ProcessResult bad_addr =
      run_process({binary("tests/fault/gossip-faultproxy"), "--target", "no-port-here"});
  CHECK(bad_addr.code == 2);
  CHECK(contains(bad_addr.err, "HOST:PORT"));
}

}  // namespace
}  // namespace gossip::fault_testing
