// net_bench: throughput of gossip_net's parameter exchange between processes on loopback, printed
// next to iperf3's single-stream rate measured in the same run, for --insecure and TLS.
//
//   net_bench [--quick] [--modes insecure,tls] [--sizes-mb 4,100,400] [--ring-nodes 8]
//             [--ring-mb 100] [--iperf-seconds 3] [--iterations N] [--no-iperf]
//             [--cases one-way,both-ways] [--notsent-lowat BYTES]
//
// --iterations N fixes the number of timed iterations per case (default: about 2 GB per case);
// --no-iperf skips the checksum and iperf3 measurements (ratio column '-'), e.g. for profiling
// the node processes with perf; --cases picks the 2-process cases; --ring-nodes 0 skips the ring;
// --notsent-lowat sets TransportOptions::notsent_lowat_bytes (default: the transport's, 0: none).
//
// Cases: 2 processes, one-way (node 0 -> node 1) and both ways at once, for each size; an n-process
// ring where every node sends its buffer to both neighbours and receives theirs each iteration.
// Rates are payload bytes per second per direction (GB/s = 1e9 B/s), measured at the receivers
// from the end of a warm-up iteration to the end of the last one, and the CPU time all node
// processes spent per GB received over the same span. Also prints CRC32C and zlib
// crc32 speed, since the checksum sits on the data path.
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <asio.hpp>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "common/log.h"
#include "net/checksum.h"
#include "net/transport.h"

using namespace gossip;
using namespace gossip::net;
using Clock = std::chrono::steady_clock;

namespace {

// CPU seconds (user + system, all threads) this process has used so far.
double cpu_seconds() {
  rusage u{};
  ::getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         1e-6 * static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec);
}

// CPU seconds and payload bytes received by all nodes of the last run_cluster, over the timed
// iterations: CPU cost per GB, which a loaded machine disturbs far less than the rates.
double g_cpu = 0, g_bytes = 0;

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

std::uint16_t free_port() {
  asio::io_context io;
  asio::ip::tcp::acceptor a(io, {asio::ip::address_v4::loopback(), 0});
  return a.local_endpoint().port();
}

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  for (std::string item; std::getline(ss, item, ',');) out.push_back(item);
  return out;
}

// ---- checksum speed
void bench_checksums() {
  std::vector<std::uint8_t> buf(std::size_t{256} << 20);
  for (std::size_t i = 0; i < buf.size(); ++i) buf[i] = static_cast<std::uint8_t>(i * 131 + 7);
  auto rate = [&](auto&& f) {
    f();  // warm
    const auto t = Clock::now();
    volatile std::uint32_t sink = 0;
    for (int r = 0; r < 3; ++r) sink = sink + f();
    return 3.0 * static_cast<double>(buf.size()) / seconds_since(t) / 1e9;
  };
  const double hw = rate([&] { return crc32c(buf.data(), buf.size()); });
  const double sw = rate([&] { return crc32c_portable(buf.data(), buf.size()); });
  const double z = rate([&] {
    return static_cast<std::uint32_t>(::crc32(0L, buf.data(), static_cast<uInt>(buf.size())));
  });
  std::printf(
      "checksum (256 MiB, one core): crc32c %s %.2f GB/s | crc32c table %.2f GB/s | "
      "zlib crc32 %.2f GB/s\n",
      crc32c_hardware() ? "SSE4.2 3-lane" : "(no SSE4.2)", hw, sw, z);
}

// ---- iperf3
struct IperfResult {
  double one_way_gbps = 0;  // GB/s
  double bidir_gbps = 0;    // GB/s per direction (mean of the two)
};

std::string run_capture(const std::string& cmd) {
  std::string out;
  FILE* p = ::popen(cmd.c_str(), "r");
  if (!p) return out;
  char buf[4096];
  while (std::size_t n = std::fread(buf, 1, sizeof(buf), p)) out.append(buf, n);
  ::pclose(p);
  return out;
}

// bits_per_second of the JSON object that follows `key`.
double json_bps(const std::string& json, const std::string& key) {
  const auto k = json.find("\"" + key + "\"");
  if (k == std::string::npos) return 0;
  const auto b = json.find("\"bits_per_second\":", k);
  if (b == std::string::npos) return 0;
  return std::atof(json.c_str() + b + 18);
}

double iperf(int seconds, bool bidir) {
  const std::uint16_t port = free_port();
  std::fflush(nullptr);  // the child must not flush our buffered output a second time
  const pid_t server = ::fork();
  if (server == 0) {
    std::freopen("/dev/null", "w", stdout);
    std::freopen("/dev/null", "w", stderr);
    ::execlp("iperf3", "iperf3", "-s", "-1", "-p", std::to_string(port).c_str(), "-B", "127.0.0.1",
             (char*)nullptr);
    std::_Exit(127);
  }
  ::usleep(300000);
  const std::string json =
      run_capture("iperf3 -c 127.0.0.1 -p " + std::to_string(port) + " -t " +
                  std::to_string(seconds) + (bidir ? " --bidir" : "") + " -J 2>/dev/null");
  int st = 0;
  ::kill(server, SIGTERM);
  ::waitpid(server, &st, 0);
  if (!bidir) return json_bps(json, "sum_received") / 8e9;
  return (json_bps(json, "sum_received") + json_bps(json, "sum_received_bidir_reverse")) / 2 / 8e9;
}

// ---- gossip_net between processes
struct Node {
  int id;
  std::uint16_t port;
  std::vector<int> out, in;
};

std::string g_certs;
long g_notsent_lowat = -1;  // --notsent-lowat; -1: TransportOptions' default

// Runs in a child process: `iterations` + 1 exchanges; writes the receive rate (GB/s per
// incoming link, mean over links), or -1 on failure, then the CPU seconds and the payload bytes
// received over the timed iterations, to `fd`.
void child(const std::vector<Node>& nodes, int me, bool insecure, std::uint64_t floats,
           int iterations, int fd) {
  set_log_level(LogLevel::kError);
  const Node& n = nodes[me];
  TransportOptions o;
  o.self = {"bench", n.id, 42, floats};
  o.listen_host = "127.0.0.1";
  o.listen_port = n.port;
  o.insecure = insecure;
  if (g_notsent_lowat >= 0) o.notsent_lowat_bytes = static_cast<std::uint32_t>(g_notsent_lowat);
  if (!insecure) {
    const std::string id = std::to_string(n.id);
    o.tls = {g_certs + "/ca.pem", g_certs + "/node-" + id + ".pem",
             g_certs + "/node-" + id + ".key"};
  }
  std::map<int, bool> nb;
  for (int j : n.out) nb[j] = true;
  for (int j : n.in) nb[j] = true;
  for (auto [j, _] : nb) o.neighbours.push_back({j, "127.0.0.1", nodes[j].port});
  o.peer_timeout_ms = 60000;
  o.heartbeat_interval_ms = 1000;
  double result = -1, cpu = 0, bytes = 0;
  {
    auto t = Transport::start(o);
    if (t.is_ok()) {
      std::vector<float> x(floats, 1.0f);
      std::vector<std::vector<float>> bufs(n.in.size(), std::vector<float>(floats));
      std::vector<RecvSpec> specs;
      for (std::size_t k = 0; k < n.in.size(); ++k) specs.push_back({n.in[k], bufs[k]});
      Clock::time_point start;
      double cpu0 = 0;
      bool ok = true;
      for (int it = 0; it <= iterations && ok; ++it) {
        if (it == 1) {
          start = Clock::now();
          cpu0 = cpu_seconds();
        }
        auto ex = (*t)->exchange(it, x, n.out, specs);
        const auto t0 = Clock::now();
        ExchangeResult r = ex->wait(deadline_in_ms(120000));
        if (std::getenv("NET_BENCH_VERBOSE")) {
          std::fprintf(stderr, "node %d iteration %d: %.3f s\n", me, it, seconds_since(t0));
        }
        if (!r.ok()) {
          std::fprintf(stderr, "node %d iteration %d: %s\n", me, it,
                       r.failures[0].status.to_string().c_str());
          ok = false;
        }
      }
      if (ok) {
        cpu = cpu_seconds() - cpu0;
        bytes = static_cast<double>(iterations) * static_cast<double>(floats) * 4 *
                static_cast<double>(n.in.size());
      }
      if (ok && !n.in.empty()) {
        result = static_cast<double>(iterations) * static_cast<double>(floats) * 4 /
                 seconds_since(start) / 1e9;
      } else if (ok) {
        result = 0;
      }
      (*t)->shutdown(5000);
    } else {
      std::fprintf(stderr, "node %d: %s\n", me, t.status().to_string().c_str());
    }
  }
  const double out[3] = {result, cpu, bytes};
  (void)!::write(fd, out, sizeof(out));  // one write below PIPE_BUF: atomic
}

// Forks one process per node; returns the mean receive rate over receiving nodes (GB/s per link).
double run_cluster(std::vector<Node> nodes, bool insecure, std::uint64_t bytes, int iterations) {
  for (auto& n : nodes) n.port = free_port();
  int fds[2];
  if (::pipe(fds) != 0) return -1;
  std::vector<pid_t> pids;
  std::fflush(nullptr);
  for (std::size_t i = 0; i < nodes.size(); ++i) {
    const pid_t pid = ::fork();
    if (pid == 0) {
      ::close(fds[0]);
      child(nodes, static_cast<int>(i), insecure, bytes / 4, iterations, fds[1]);
      std::_Exit(0);
    }
    pids.push_back(pid);
  }
  ::close(fds[1]);
  double sum = 0;
  int receivers = 0;
  bool failed = false;
  g_cpu = g_bytes = 0;
  for (std::size_t i = 0; i < nodes.size(); ++i) {
    double in[3] = {-1, 0, 0};
    if (::read(fds[0], in, sizeof(in)) != sizeof(in) || in[0] < 0) failed = true;
    const double r = in[0];
    g_cpu += in[1];
    g_bytes += in[2];
    if (r > 0) {
      sum += r;
      receivers++;
    }
  }
  ::close(fds[0]);
  for (pid_t p : pids) ::waitpid(p, nullptr, 0);
  return failed || receivers == 0 ? -1 : sum / receivers;
}

int g_iterations = 0;  // --iterations; 0: about 2 GB per case

int iterations_for(std::uint64_t bytes) {
  if (g_iterations > 0) return g_iterations;
  const std::uint64_t target = std::uint64_t{2} << 30;
  return static_cast<int>(std::clamp<std::uint64_t>(target / bytes, 3, 250));
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> modes = {"insecure", "tls"};
  std::vector<std::string> sizes = {"4", "100", "400"};
  int ring_nodes = 8;
  int ring_mb = 100;
  int iperf_seconds = 3;
  bool reference = true;
  bool one_way = true, both_ways = true;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string { return i + 1 < argc ? argv[++i] : ""; };
    if (a == "--quick") {
      sizes = {"4"};
      ring_nodes = 4;
      ring_mb = 4;
      iperf_seconds = 1;
    } else if (a == "--modes") {
      modes = split(next());
    } else if (a == "--sizes-mb") {
      sizes = split(next());
    } else if (a == "--ring-nodes") {
      ring_nodes = std::atoi(next().c_str());
    } else if (a == "--ring-mb") {
      ring_mb = std::atoi(next().c_str());
    } else if (a == "--iperf-seconds") {
      iperf_seconds = std::atoi(next().c_str());
    } else if (a == "--iterations") {
      g_iterations = std::atoi(next().c_str());
    } else if (a == "--cases") {
      const std::vector<std::string> c = split(next());
      one_way = std::find(c.begin(), c.end(), "one-way") != c.end();
      both_ways = std::find(c.begin(), c.end(), "both-ways") != c.end();
    } else if (a == "--no-iperf") {
      reference = false;
    } else if (a == "--notsent-lowat") {
      g_notsent_lowat = std::atol(next().c_str());
    } else {
      std::fprintf(stderr,
                   "usage: %s [--quick] [--modes insecure,tls] [--sizes-mb 4,100,400] "
                   "[--ring-nodes 8] [--ring-mb 100] [--iperf-seconds 3] [--iterations N] "
                   "[--no-iperf] [--cases one-way,both-ways] [--notsent-lowat BYTES]\n",
                   argv[0]);
      return 2;
    }
  }
  std::signal(SIGPIPE, SIG_IGN);
  char tmpl[] = "/tmp/net-bench-certs-XXXXXX";
  g_certs = ::mkdtemp(tmpl);
  const std::string gen = std::string(GOSSIP_SOURCE_DIR) + "/scripts/gen-certs.sh " + g_certs +
                          " " + std::to_string(std::max(ring_nodes, 2)) + " bench 2>/dev/null";
  if (std::system(gen.c_str()) != 0) {
    std::fprintf(stderr, "net_bench: %s failed\n", gen.c_str());
    return 1;
  }
  std::printf(
      "net_bench: %ld CPUs online; payload GB/s per direction (1 GB = 1e9 B); "
      "TCP_NOTSENT_LOWAT %ld bytes per link\n",
      ::sysconf(_SC_NPROCESSORS_ONLN),
      g_notsent_lowat >= 0 ? g_notsent_lowat
                           : static_cast<long>(TransportOptions{}.notsent_lowat_bytes));
  if (reference) bench_checksums();
  const double ip1 = reference ? iperf(iperf_seconds, false) : 0;
  const double ip2 = reference ? iperf(iperf_seconds, true) : 0;
  if (reference)
    std::printf(
        "iperf3 single stream, loopback: one-way %.2f GB/s (%.1f Gbit/s); both ways %.2f "
        "GB/s per direction\n",
        ip1, ip1 * 8, ip2);
  std::printf("\n%-26s %-9s %10s %12s %9s %10s\n", "case", "mode", "gossip", "iperf3", "ratio",
              "CPU s/GB");
  auto row = [](const std::string& name, const std::string& mode, double g, double ref) {
    if (g < 0) {
      std::printf("%-26s %-9s %10s %12.2f %9s\n", name.c_str(), mode.c_str(), "FAILED", ref, "-");
    } else if (ref <= 0) {
      std::printf("%-26s %-9s %10.2f %12s %9s %10.2f\n", name.c_str(), mode.c_str(), g, "-", "-",
                  g_bytes > 0 ? g_cpu / (g_bytes / 1e9) : 0.0);
    } else {
      std::printf("%-26s %-9s %10.2f %12.2f %8.0f%% %10.2f\n", name.c_str(), mode.c_str(), g, ref,
                  100 * g / ref, g_bytes > 0 ? g_cpu / (g_bytes / 1e9) : 0.0);
    }
    std::fflush(stdout);
  };
  for (const std::string& mode : modes) {
    const bool insecure = mode == "insecure";
    for (const std::string& s : sizes) {
      const std::uint64_t bytes = std::stoull(s) * 1000 * 1000;
      const int iters = iterations_for(bytes);
      if (one_way) {
        row("2 procs one-way " + s + " MB", mode,
            run_cluster({{0, 0, {1}, {}}, {1, 0, {}, {0}}}, insecure, bytes, iters), ip1);
      }
      if (both_ways) {
        row("2 procs both ways " + s + " MB", mode,
            run_cluster({{0, 0, {1}, {1}}, {1, 0, {0}, {0}}}, insecure, bytes, iters), ip2);
      }
    }
    if (ring_nodes < 2) continue;
    std::vector<Node> ring;
    for (int i = 0; i < ring_nodes; ++i) {
      const int l = (i + ring_nodes - 1) % ring_nodes, r = (i + 1) % ring_nodes;
      if (l == r) {
        ring.push_back({i, 0, {l}, {l}});
      } else {
        ring.push_back({i, 0, {l, r}, {l, r}});
      }
    }
    // Every node receives from two neighbours at once: compare the sum over all links with the
    // sum of iperf3's two directions (the machine's loopback capacity for this many streams).
    const double per_link = run_cluster(ring, insecure, std::uint64_t(ring_mb) * 1000 * 1000, 3);
    const double links = ring_nodes == 2 ? 2 : 2.0 * ring_nodes;
    row(std::to_string(ring_nodes) + "-proc ring " + std::to_string(ring_mb) + " MB (sum)", mode,
        per_link < 0 ? -1 : per_link * links, 2 * ip2);
  }
  std::printf(
      "\nCPU s/GB: CPU seconds (user + system) of all node processes per GB received, "
      "over the timed iterations; less disturbed by other load than the rates.\n");
  std::printf(
      "ring: sum over all %d links of the per-link receive rate, against the sum of "
      "iperf3's two directions.\n",
      ring_nodes == 2 ? 2 : 2 * ring_nodes);
  std::system(("rm -rf " + g_certs).c_str());
  return 0;
}
