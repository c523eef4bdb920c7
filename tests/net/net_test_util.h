// Helpers shared by the net tests: certificates made by scripts/gen-certs.sh, free ports,
// options for a node of a small graph, and a raw client that speaks the wire format by hand
// (to send what an honest Transport never would).
#pragma once

#include <asio.hpp>
#include <cstdlib>
#include <fstream>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "net/frame.h"
#include "net/handshake.h"
#include "net/transport.h"
#include "tests/support/process.h"

namespace gossip::net::testing {

inline constexpr const char* kJob = "job-test";
inline constexpr std::uint64_t kTopology = 0x70701;

// A CA and node certificates for job kJob (0..7 from "ca1", node 4 from "ca2"): the ones the
// ctest fixture "net_certs" made in
// the build tree (GOSSIP_NET_TEST_CERTS/<ca_name>), or, when they are missing,
// generated once per process into a temp dir.
inline std::string cert_dir(const std::string& ca_name = "ca1", const std::string& job = kJob) {
  static std::mutex mu;
  static std::map<std::string, std::string> dirs;
  std::lock_guard l(mu);
  const std::string key = ca_name + "/" + job;
  if (auto it = dirs.find(key); it != dirs.end()) return it->second;
  if (job == kJob) {
    const std::string fixture = std::string(GOSSIP_NET_TEST_CERTS) + "/" + ca_name;
    if (std::ifstream(fixture + "/node-4.key").good()) return dirs[key] = fixture;
  }
  const std::string script = std::string(GOSSIP_NET_TEST_SOURCE_DIR) + "/scripts/gen-certs.sh";
  char tmpl[] = "/tmp/gossip-net-certs-XXXXXX";
  const std::string dir = ::mkdtemp(tmpl);
  if (gossip::testing::run_shell(script + " " + dir + " 10 " + job) != 0) return "";
  dirs[key] = dir;
  return dir;
}

inline TlsConfig tls_for(const std::string& dir, int id) {
  return {dir + "/ca.pem", dir + "/node-" + std::to_string(id) + ".pem",
          dir + "/node-" + std::to_string(id) + ".key"};
}

inline std::uint16_t free_port() {
  asio::io_context io;
  asio::ip::tcp::acceptor a(io, {asio::ip::address_v4::loopback(), 0});
  return a.local_endpoint().port();
}

inline TransportOptions node_options(int id, std::uint64_t param_count, bool insecure,
                                     const std::map<int, std::uint16_t>& neighbour_ports,
                                     const std::string& certs = "") {
  TransportOptions o;
  o.self = {kJob, id, kTopology, param_count};
  o.listen_host = "127.0.0.1";
  o.insecure = insecure;
  if (!insecure) o.tls = tls_for(certs.empty() ? cert_dir() : certs, id);
  for (auto [j, port] : neighbour_ports) o.neighbours.push_back({j, "127.0.0.1", port});
  o.chunk_bytes = 4096;
  o.heartbeat_interval_ms = 100;
  o.peer_timeout_ms = 2000;
  o.handshake_timeout_ms = 2000;
  return o;
}

// Deterministic contents of node `id`'s buffer at iteration `t`.
inline std::vector<float> pattern(int id, std::uint64_t t, std::size_t n) {
  std::vector<float> v(n);
  for (std::size_t k = 0; k < n; ++k) {
    v[k] = static_cast<float>(id) * 1000.0f + static_cast<float>(t) + static_cast<float>(k) * 1e-3f;
  }
  return v;
}

// A plaintext client that writes frames by hand (insecure mode only).
class RawClient {
 public:
  bool connect(std::uint16_t port) {
    asio::error_code ec;
    sock_.connect({asio::ip::address_v4::loopback(), port}, ec);
    return !ec;
  }
  void write(const std::string& bytes) {
    asio::error_code ec;
    asio::write(sock_, asio::buffer(bytes), ec);
  }
  void write(const void* p, std::size_t n) {
    asio::error_code ec;
    asio::write(sock_, asio::buffer(p, n), ec);
  }
  // Sends our Hello and reads the HelloAck; true when accepted.
  bool handshake(const Identity& self) {
    write(encode_frame(FrameType::kHello, make_hello(self, 1, 0)));
    FrameHeaderBytes hb;
    asio::error_code ec;
    asio::read(sock_, asio::buffer(hb), ec);
    if (ec) return false;
    auto h = decode_frame_header(hb, handshake_limits());
    if (!h.is_ok()) return false;
    std::vector<std::uint8_t> msg(h->header_len);
    asio::read(sock_, asio::buffer(msg), ec);
    if (ec) return false;
    pb::HelloAck ack;
    return parse_message(msg, &ack).is_ok() && ack.accepted();
  }
  // True when the server closed the connection (reads EOF or an error within `ms`).
  bool closed_by_peer(int ms) {
    sock_.non_blocking(true);
    const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
    char buf[4096];
    while (std::chrono::steady_clock::now() < end) {
      asio::error_code ec;
      sock_.read_some(asio::buffer(buf), ec);
      if (ec == asio::error::would_block) {
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
        continue;
      }
      if (ec) return true;
    }
    return false;
  }
  void close() {
    asio::error_code ec;
    sock_.close(ec);
  }

 private:
  asio::io_context io_;
  asio::ip::tcp::socket sock_{io_};
};

}  // namespace gossip::net::testing
