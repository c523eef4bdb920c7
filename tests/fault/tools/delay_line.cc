// gossip-delayline: a packet-level delay line for the network-namespace harness (scripts/netns.sh
// `delay`), the part of netem this kernel lacks. Unlike a TCP proxy (fault_proxy.cc) it forwards
// Ethernet frames, so TCP's own round trip, window and ACK clock see the delay, and every kind of
// traffic (gossipd's links, Gloo's, anything else) passes the same path.
//
// It takes pairs of interfaces of the namespace it runs in, HOST:BRIDGE. Frames that arrive on HOST
// (sent by the host at its other end) leave through BRIDGE after the delay; frames that arrive on
// BRIDGE leave through HOST at once. scripts/netns.sh puts it between a host's veth and the hub's
// bridge, so `--delay-ms 5` is netem's `delay 5ms` on every host's egress: 5 ms one way, a 10 ms
// round trip between two hosts. The delay is constant, so each direction stays in order.
//
// Frames are read and written with PACKET_VNET_HDR: veth hands over TCP segments with the checksum
// left to offload (CHECKSUM_PARTIAL) and as GSO super-frames of up to 64 KiB; the virtio header
// carries both facts through the copy, so the far end's stack takes the frames as its own veth
// would have given them, and the hosts keep their offloads (no per-segment checksums on 2 cores).
//
//   gossip-delayline --delay-ms MS HOST:BRIDGE...
//
// Prints "ready" on stdout once every socket is bound; exits 2 on a bad argument or an interface
// it cannot open. SIGINT/SIGTERM stop it; it then prints one line of counters per pair to stderr
// (frames and bytes each way, frames dropped: too large, failed to send, or over the queue bound).
#include <arpa/inet.h>
#include <linux/if_packet.h>
#include <net/ethernet.h>
#include <net/if.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <deque>
#include <string>
#include <vector>

namespace gossip::delayline {
namespace {

// A GSO super-frame is at most 64 KiB of IP packet; room for the Ethernet and virtio headers and
// for kernels that allow larger ones (a frame that does not fit is counted and dropped).
constexpr std::size_t kFrameBytes = 256 * 1024;
// Bytes held per direction before new frames are dropped (a full queue is a full router buffer).
constexpr std::size_t kMaxQueuedBytes = std::size_t{64} << 20;
constexpr int kSocketBufferBytes = 8 << 20;
// struct virtio_net_hdr (linux/virtio_net.h, which does not compile as C++): flags, gso_type,
// hdr_len, gso_size, csum_start, csum_offset; passed through unread.
constexpr std::size_t kVnetHeaderBytes = 10;

volatile sig_atomic_t g_stop = 0;
void on_signal(int) { g_stop = 1; }

std::int64_t now_ns() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return std::int64_t{ts.tv_sec} * 1'000'000'000 + ts.tv_nsec;
}

struct Frame {
  std::int64_t due_ns = 0;
  std::vector<std::uint8_t> bytes;  // virtio_net_hdr, then the Ethernet frame
};

// One direction: frames read from `in_fd`, written to `out_fd` when due.
struct Direction {
  std::string name;
  int in_fd = -1;
  int out_fd = -1;
  std::int64_t delay_ns = 0;
  std::deque<Frame> queue;
  std::size_t queued_bytes = 0;
  std::uint64_t frames = 0, bytes = 0, dropped = 0;
};

// An AF_PACKET socket on `ifname` that sees every frame arriving there (not the ones it sends),
// with virtio headers on both paths; non-blocking.
int open_port(const std::string& ifname) {
  const unsigned index = if_nametoindex(ifname.c_str());
  if (index == 0) {
    std::fprintf(stderr, "gossip-delayline: no interface '%s' here: %s\n", ifname.c_str(),
                 std::strerror(errno));
    return -1;
  }
  const int fd = socket(AF_PACKET, SOCK_RAW | SOCK_NONBLOCK | SOCK_CLOEXEC, htons(ETH_P_ALL));
  if (fd < 0) {
    std::fprintf(stderr, "gossip-delayline: socket(AF_PACKET): %s (needs CAP_NET_RAW)\n",
                 std::strerror(errno));
    return -1;
  }
  const int one = 1;
  const int buf = kSocketBufferBytes;
  bool ok = setsockopt(fd, SOL_PACKET, PACKET_VNET_HDR, &one, sizeof one) == 0 &&
            setsockopt(fd, SOL_PACKET, PACKET_IGNORE_OUTGOING, &one, sizeof one) == 0;
  // FORCE lifts the sysctl caps (root); the plain options are the fallback.
  if (setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &buf, sizeof buf) != 0) {
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &buf, sizeof buf);
  }
  if (setsockopt(fd, SOL_SOCKET, SO_SNDBUFFORCE, &buf, sizeof buf) != 0) {
    setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &buf, sizeof buf);
  }
  sockaddr_ll addr{};
  addr.sll_family = AF_PACKET;
  addr.sll_protocol = htons(ETH_P_ALL);
  addr.sll_ifindex = static_cast<int>(index);
  ok = ok && bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
  if (!ok) {
    std::fprintf(stderr, "gossip-delayline: %s: %s\n", ifname.c_str(), std::strerror(errno));
    close(fd);
    return -1;
  }
  return fd;
}

// Reads every frame waiting on d.in_fd into d's queue, due `delay_ns` from now.
void receive(Direction& d, std::vector<std::uint8_t>& scratch) {
  for (;;) {
    const ssize_t n = recv(d.in_fd, scratch.data(), scratch.size(), MSG_TRUNC);
    if (n < 0) {
      if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
        std::fprintf(stderr, "gossip-delayline: %s: recv: %s\n", d.name.c_str(),
                     std::strerror(errno));
      }
      return;
    }
    const auto size = static_cast<std::size_t>(n);
    if (size > scratch.size() || size <= kVnetHeaderBytes ||
        d.queued_bytes + size > kMaxQueuedBytes) {
      ++d.dropped;
      continue;
    }
    Frame f;
    f.due_ns = now_ns() + d.delay_ns;
    f.bytes.assign(scratch.begin(), scratch.begin() + n);
    d.queued_bytes += size;
    d.queue.push_back(std::move(f));
  }
}

// Sends the frames of d that are due. Returns false when the socket is full (try again soon).
bool transmit(Direction& d, std::int64_t now) {
  while (!d.queue.empty() && d.queue.front().due_ns <= now) {
    Frame& f = d.queue.front();
    const ssize_t n = send(d.out_fd, f.bytes.data(), f.bytes.size(), 0);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == ENOBUFS)) return false;
    if (n < 0) {
      ++d.dropped;  // e.g. a header the kernel refuses; the frame is lost, as on a bad link
    } else {
      ++d.frames;
      d.bytes += f.bytes.size() - kVnetHeaderBytes;
    }
    d.queued_bytes -= f.bytes.size();
    d.queue.pop_front();
  }
  return true;
}

int run(double delay_ms, const std::vector<std::string>& pairs) {
  // Directions 2k (host -> bridge, delayed) and 2k+1 (bridge -> host) of pair k.
  std::vector<Direction> dirs;
  std::vector<int> fds;
  for (const std::string& p : pairs) {
    const auto colon = p.find(':');
    if (colon == std::string::npos || colon == 0 || colon + 1 == p.size()) {
      std::fprintf(stderr, "gossip-delayline: '%s' is not HOST:BRIDGE (two interface names)\n",
                   p.c_str());
      return 2;
    }
    const std::string host = p.substr(0, colon), bridge = p.substr(colon + 1);
    const int h = open_port(host), b = open_port(bridge);
    if (h < 0 || b < 0) return 2;
    fds.push_back(h);
    fds.push_back(b);
    Direction out, back;
    out.name = host + "->" + bridge;
    out.in_fd = back.out_fd = h;
    out.out_fd = back.in_fd = b;
    out.delay_ns = static_cast<std::int64_t>(delay_ms * 1e6);
    back.name = bridge + "->" + host;
    dirs.push_back(std::move(out));
    dirs.push_back(std::move(back));
  }
  const int ep = epoll_create1(EPOLL_CLOEXEC);
  const int timer = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
  if (ep < 0 || timer < 0) {
    std::fprintf(stderr, "gossip-delayline: epoll/timerfd: %s\n", std::strerror(errno));
    return 1;
  }
  for (std::size_t i = 0; i < dirs.size(); ++i) {
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u64 = i;
    epoll_ctl(ep, EPOLL_CTL_ADD, dirs[i].in_fd, &ev);
  }
  epoll_event tev{};
  tev.events = EPOLLIN;
  tev.data.u64 = dirs.size();
  epoll_ctl(ep, EPOLL_CTL_ADD, timer, &tev);
  prctl(PR_SET_TIMERSLACK, 1UL);  // the default 50 µs slack would be added to every release

  std::printf("ready\n");
  std::fflush(stdout);
  std::vector<std::uint8_t> scratch(kFrameBytes);
  std::vector<epoll_event> events(64);
  while (!g_stop) {
    const int n = epoll_wait(ep, events.data(), static_cast<int>(events.size()), -1);
    if (n < 0 && errno != EINTR) {
      std::fprintf(stderr, "gossip-delayline: epoll_wait: %s\n", std::strerror(errno));
      return 1;
    }
    for (int i = 0; i < n; ++i) {
      const std::size_t k = events[i].data.u64;
      if (k == dirs.size()) {
        std::uint64_t expirations = 0;
        [[maybe_unused]] const ssize_t r = read(timer, &expirations, sizeof expirations);
      } else {
        receive(dirs[k], scratch);
      }
    }
    // Send what is due; arm the timer for the earliest frame still held.
    const std::int64_t now = now_ns();
    std::int64_t next = -1;
    for (Direction& d : dirs) {
      std::int64_t due = -1;
      if (!transmit(d, now)) {
        due = now + 100'000;  // the socket is full: retry in 0.1 ms
      } else if (!d.queue.empty()) {
        due = d.queue.front().due_ns;
      }
      if (due >= 0 && (next < 0 || due < next)) next = due;
    }
    itimerspec spec{};
    if (next >= 0) {
      spec.it_value.tv_sec = next / 1'000'000'000;
      spec.it_value.tv_nsec = next % 1'000'000'000;
    }
    timerfd_settime(timer, TFD_TIMER_ABSTIME, &spec, nullptr);  // all zero disarms
  }
  for (const Direction& d : dirs) {
    std::fprintf(stderr, "gossip-delayline: %-16s %llu frames, %llu bytes, %llu dropped\n",
                 d.name.c_str(), static_cast<unsigned long long>(d.frames),
                 static_cast<unsigned long long>(d.bytes),
                 static_cast<unsigned long long>(d.dropped));
  }
  for (int fd : fds) close(fd);
  return 0;
}

}  // namespace
}  // namespace gossip::delayline

int main(int argc, char** argv) {
  CLI::App app{
      "gossip-delayline: holds the frames a host sends for a fixed delay before they reach the "
      "bridge (netem's `delay` on every host's egress, for kernels without netem). "
      "Used by scripts/netns.sh delay."};
  double delay_ms = 5;
  std::vector<std::string> pairs;
  app.add_option("--delay-ms", delay_ms, "one-way delay added to frames a host sends")
      ->check(CLI::Range(0.0, 10000.0));
  app.add_option("pairs", pairs,
                 "HOST:BRIDGE interface pairs: frames arriving on HOST leave on BRIDGE after the "
                 "delay, frames arriving on BRIDGE leave on HOST at once")
      ->required();
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    app.exit(e);
    return e.get_exit_code() == 0 ? 0 : 2;  // --help; else a usage error
  }
  struct sigaction sa {};
  sa.sa_handler = gossip::delayline::on_signal;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  return gossip::delayline::run(delay_ms, pairs);
}
