// Transport over real loopback sockets, one io thread per node, nodes as threads of this process:
// ring and complete graphs exchanging 100 iterations (TLS and --insecure), a neighbour that starts
// late, iteration tags (early frames buffered, stale ones discarded, far-ahead peers paused), each
// kind of bad peer rejected while honest peers carry on, silent peers reported at the deadline.
#include "net/transport.h"

#include <doctest/doctest.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <mutex>
#include <sstream>
#include <thread>

#include "net/checksum.h"
#include "net_test_util.h"
#include "tests/support/eventually.h"

namespace gossip::net {
namespace {

using testing::node_options;
using testing::pattern;
using Clock = std::chrono::steady_clock;

std::vector<std::vector<int>> ring(int n) {
  std::vector<std::vector<int>> g(n);
  for (int i = 0; i < n; ++i) g[i] = {(i + n - 1) % n, (i + 1) % n};
  return g;
}

std::vector<std::vector<int>> complete(int n) {
  std::vector<std::vector<int>> g(n);
  for (int i = 0; i < n; ++i) {
    for (int j = 0; j < n; ++j) {
      if (j != i) g[i].push_back(j);
    }
  }
  return g;
}

// Starts the highest id first: a node dials only higher ids, whose ports are then known.
std::vector<std::unique_ptr<Transport>> start_cluster(const std::vector<std::vector<int>>& g,
                                                      std::uint64_t params, bool insecure) {
  const int n = static_cast<int>(g.size());
  std::vector<std::unique_ptr<Transport>> nodes(n);
  std::map<int, std::uint16_t> ports;
  for (int id = n - 1; id >= 0; --id) {
    std::map<int, std::uint16_t> nb;
    for (int j : g[id]) nb[j] = j > id ? ports.at(j) : 0;
    auto t = Transport::start(node_options(id, params, insecure, nb));
    REQUIRE_MESSAGE(t.is_ok(), t.status().to_string());
    ports[id] = (*t)->port();
    nodes[id] = std::move(*t);
  }
  return nodes;
}

struct Counters {
  std::atomic<int> failures{0};
  std::atomic<int> mismatches{0};
  std::atomic<int> bad_events{0};
  std::atomic<long> chunks{0};
};

// Node `id`'s loop: send x_t to all neighbours, receive theirs, check every buffer arrived whole.
void run_node(Transport& t, const std::vector<int>& nbrs, std::uint64_t params, int iterations,
              Counters& c) {
  std::vector<std::vector<float>> recv(nbrs.size(), std::vector<float>(params));
  for (int it = 0; it < iterations; ++it) {
    const auto x = pattern(t.node_id(), it, params);
    std::vector<RecvSpec> specs;
    for (std::size_t k = 0; k < nbrs.size(); ++k) {
      std::fill(recv[k].begin(), recv[k].end(), -1.0f);
      specs.push_back({nbrs[k], recv[k]});
    }
    auto ex = t.exchange(it, x, nbrs, specs);
    const Deadline deadline = deadline_in_ms(20000);
    std::map<int, std::size_t> covered;
    while (auto e = ex->next_chunk(deadline)) {
      if (e->iteration != static_cast<std::uint64_t>(it)) c.bad_events++;
      covered[e->peer] += e->count;
      c.chunks++;
    }
    ExchangeResult r = ex->wait(deadline);
    if (!r.ok()) {
      c.failures++;
      MESSAGE("node " << t.node_id() << " it " << it << ": " << r.failures[0].peer << " "
                      << r.failures[0].status.to_string());
    }
    for (std::size_t k = 0; k < nbrs.size(); ++k) {
      const auto want = pattern(nbrs[k], it, params);
      if (covered[nbrs[k]] != params) c.bad_events++;
      if (crc32c(want.data(), want.size() * 4) != crc32c(recv[k].data(), recv[k].size() * 4) ||
          std::memcmp(want.data(), recv[k].data(), want.size() * 4) != 0) {
        c.mismatches++;
      }
    }
  }
}

void run_graph(const std::vector<std::vector<int>>& g, bool insecure) {
  const std::uint64_t params = 5000;  // 20000 bytes: 5 chunks of 4096
  auto nodes = start_cluster(g, params, insecure);
  Counters c;
  std::vector<std::thread> threads;
  for (std::size_t id = 0; id < g.size(); ++id) {
    threads.emplace_back([&, id] { run_node(*nodes[id], g[id], params, 100, c); });
  }
  for (auto& th : threads) th.join();
  CHECK(c.failures == 0);
  CHECK(c.mismatches == 0);
  CHECK(c.bad_events == 0);
  long edges = 0;
  for (auto& nb : g) edges += static_cast<long>(nb.size());
  CHECK(c.chunks == edges * 100 * 5);
  for (auto& n : nodes) {
    const TransportStats s = n->stats();
    CHECK(s.bad_frames == 0);
    CHECK(s.handshakes_rejected == 0);
    CHECK(s.bytes_received == g[n->node_id()].size() * 100 * params * 4);
    // The per-neighbour split: each neighbour carried 100 messages each way, nobody else any.
    CHECK(s.peer_bytes.size() == g[n->node_id()].size());
    for (int j : g[n->node_id()]) {
      CHECK(s.peer_bytes.at(j).sent == 100 * params * 4);
      CHECK(s.peer_bytes.at(j).received == 100 * params * 4);
    }
  }
}

using gossip::testing::eventually;

// Nodes 5 and 6 are honest neighbours; node 6 also expects node 4 (which dials it).
struct HonestPair {
  static constexpr std::uint64_t kParams = 3000;
  std::unique_ptr<Transport> n5, n6;
  explicit HonestPair(bool insecure, std::int64_t peer_timeout_ms = 2000) {
    auto o6 = node_options(6, kParams, insecure, {{5, 0}, {4, 0}});
    o6.peer_timeout_ms = peer_timeout_ms;
    auto t6 = Transport::start(o6);
    REQUIRE_MESSAGE(t6.is_ok(), t6.status().to_string());
    n6 = std::move(*t6);
    auto t5 = Transport::start(node_options(5, kParams, insecure, {{6, n6->port()}}));
    REQUIRE_MESSAGE(t5.is_ok(), t5.status().to_string());
    n5 = std::move(*t5);
    // Both ends: the acceptor counts the link as up when it sends HelloAck, the dialer when it
    // has read it.
    const int want5[] = {5}, want6[] = {6};
    REQUIRE(n6->wait_connected(want5, deadline_in_ms(5000)));
    REQUIRE(n5->wait_connected(want6, deadline_in_ms(5000)));
  }
  // One iteration between 5 and 6; true when both got exactly the other's buffer.
  bool exchange_ok(std::uint64_t it) {
    std::vector<float> r5(kParams), r6(kParams);
    const auto x5 = pattern(5, it, kParams), x6 = pattern(6, it, kParams);
    const int to6[] = {6}, to5[] = {5};
    const RecvSpec s5[] = {{6, r5}}, s6[] = {{5, r6}};
    auto e5 = n5->exchange(it, x5, to6, s5);
    auto e6 = n6->exchange(it, x6, to5, s6);
    const bool ok = e5->wait(deadline_in_ms(5000)).ok() && e6->wait(deadline_in_ms(5000)).ok();
    return ok && r5 == x6 && r6 == x5;
  }
  // Starts `o`, a node that dials 6, which 6 must reject at the handshake: 6 counts a rejected
  // handshake and the intruder connects to nobody. Returns the intruder.
  std::unique_ptr<Transport> start_rejected(const TransportOptions& o) {
    auto bad = Transport::start(o);
    REQUIRE_MESSAGE(bad.is_ok(), bad.status().to_string());
    CHECK(eventually([&] { return n6->stats().handshakes_rejected >= 1; }));
    CHECK((*bad)->connected_peers().empty());
    return std::move(*bad);
  }
};

}  // namespace

TEST_CASE("ring of 5 exchanges 100 iterations over TLS, every buffer arrives intact") {
  run_graph(ring(5), /*insecure=*/false);
}

TEST_CASE("ring of 5 exchanges 100 iterations in insecure mode") {
  run_graph(ring(5), /*insecure=*/true);
}

TEST_CASE("complete graph of 4 exchanges 100 iterations over TLS") {
  run_graph(complete(4), /*insecure=*/false);
}

TEST_CASE("complete graph of 4 exchanges 100 iterations in insecure mode") {
  run_graph(complete(4), /*insecure=*/true);
}

TEST_CASE("a neighbour that starts later is dialed again until it answers") {
  const std::uint64_t params = 2000;
  const std::uint16_t port1 = testing::free_port();
  auto t0 = Transport::start(node_options(0, params, false, {{1, port1}}));
  REQUIRE(t0.is_ok());
  auto& n0 = **t0;
  const auto x0 = pattern(0, 0, params);
  std::vector<float> r0(params);
  const int to1[] = {1};
  const RecvSpec s0[] = {{1, r0}};
  auto e0 = n0.exchange(0, x0, to1, s0);  // posted before node 1 exists
  std::this_thread::sleep_for(std::chrono::milliseconds(400));
  CHECK(n0.connected_peers().empty());
  auto o1 = node_options(1, params, false, {{0, 0}});
  o1.listen_port = port1;
  o1.degree = 1;
  auto t1 = Transport::start(o1);
  REQUIRE_MESSAGE(t1.is_ok(), t1.status().to_string());
  auto& n1 = **t1;
  const auto x1 = pattern(1, 0, params);
  std::vector<float> r1(params);
  const int to0[] = {0};
  const RecvSpec s1[] = {{0, r1}};
  auto e1 = n1.exchange(0, x1, to0, s1);
  CHECK(e0->wait(deadline_in_ms(5000)).ok());
  CHECK(e1->wait(deadline_in_ms(5000)).ok());
  CHECK(r0 == x1);
  CHECK(r1 == x0);
  auto hello = n0.peer_hello(1);
  REQUIRE(hello.has_value());
  CHECK(hello->degree() == 1);
}

TEST_CASE("iteration tags: early frames are buffered, stale ones dropped, far-ahead ones paused") {
  HonestPair p(/*insecure=*/true);
  const std::uint64_t n = HonestPair::kParams;
  std::vector<std::vector<float>> sent;
  for (int t = 0; t < 8; ++t) sent.push_back(pattern(5, t, n));
  std::atomic<int> sends_ok{0};
  auto send = [&](int t) { p.n5->send(6, t, sent[t], [&](Status s) { sends_ok += s.is_ok(); }); };
  auto recv = [&](int t, std::int64_t ms, std::vector<float>& out) {
    const RecvSpec spec[] = {{5, out}};
    return p.n6->exchange(t, {}, {}, spec)->wait(deadline_in_ms(ms));
  };
  std::vector<float> out(n);

  // Iterations 0 and 1 arrive before node 6 posts anything: 0 and 1 are buffered.
  send(0);
  send(1);
  REQUIRE(eventually([&] { return sends_ok == 2; }));
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  CHECK(recv(0, 3000, out).ok());
  CHECK(out == sent[0]);
  CHECK(recv(1, 3000, out).ok());
  CHECK(out == sent[1]);

  // Node 6 gives up on iteration 2; node 5's late iteration-2 data is then stale and dropped,
  // and iteration 3 still gets iteration-3 data.
  ExchangeResult r = recv(2, 100, out);
  REQUIRE(r.failures.size() == 1);
  CHECK(r.failures[0].peer == 5);
  CHECK(r.failures[0].status.code() == StatusCode::kDeadlineExceeded);
  send(2);
  send(3);
  CHECK(recv(3, 3000, out).ok());
  CHECK(out == sent[3]);
  CHECK(p.n6->stats().stale_frames >= 1);

  // Three iterations in flight at once: the third waits (TCP back-pressure) until node 6
  // catches up, and each receive still gets its own iteration.
  send(4);
  send(5);
  send(6);
  for (int t = 4; t <= 6; ++t) {
    CHECK(recv(t, 3000, out).ok());
    CHECK(out == sent[t]);
  }
  CHECK(eventually([&] { return sends_ok == 7; }));
  CHECK(p.n6->stats().bad_frames == 0);
}

TEST_CASE(
    "initial_floor discards every frame until a control handler's reset_floor says where the data "
    "starts, and the frames behind that message are taken") {
  // Node 6 discards everything from the start; node 5's frames far ahead would otherwise pause the
  // link (TCP back-pressure) with the control message behind them.
  auto o6 = node_options(6, HonestPair::kParams, true, {{5, 0}});
  o6.initial_floor = UINT64_MAX;
  auto t6 = Transport::start(o6);
  REQUIRE_MESSAGE(t6.is_ok(), t6.status().to_string());
  std::unique_ptr<Transport> n6 = std::move(*t6);
  std::atomic<int> bases{0};
  n6->set_control_handler([&](int peer, std::string_view control) {
    if (control.starts_with("base ")) {
      n6->reset_floor(peer, std::stoull(std::string(control.substr(5))));  // on the io thread
      ++bases;
    }
    return Status::ok();
  });
  auto t5 = Transport::start(node_options(5, HonestPair::kParams, true, {{6, n6->port()}}));
  REQUIRE_MESSAGE(t5.is_ok(), t5.status().to_string());
  std::unique_ptr<Transport> n5 = std::move(*t5);
  const int want6[] = {6};
  REQUIRE(n5->wait_connected(want6, deadline_in_ms(5000)));  // a control message needs the link
  const std::uint64_t n = HonestPair::kParams;
  std::map<std::uint64_t, std::vector<float>> sent;
  for (std::uint64_t t : {0, 3, 40, 41, 100, 101}) sent[t] = pattern(5, t, n);
  std::atomic<int> sends_ok{0};
  for (std::uint64_t t : {0, 3, 40, 41}) {
    n5->send(6, t, sent[t], [&](Status s) { sends_ok += s.is_ok(); });
  }
  n5->send_control(6, "base 100");
  for (std::uint64_t t : {100, 101}) {
    n5->send(6, t, sent[t], [&](Status s) { sends_ok += s.is_ok(); });
  }
  REQUIRE(eventually([&] { return sends_ok == 6 && bases == 1; }));
  std::vector<float> out(n);
  for (std::uint64_t t : {100, 101}) {
    const RecvSpec spec[] = {{5, out}};
    CHECK(n6->exchange(t, {}, {}, spec)->wait(deadline_in_ms(3000)).ok());
    CHECK(out == sent[t]);
  }
  CHECK(n6->stats().stale_frames >= 4);  // 0, 3, 40 and 41: below the floor
  // Set from another thread, the floor moves once the io thread gets to it: lower again here.
  n6->reset_floor(5, 7);
  n5->send(6, 7, sent[0], [&](Status s) { sends_ok += s.is_ok(); });
  const RecvSpec spec[] = {{5, out}};
  CHECK(n6->exchange(7, {}, {}, spec)->wait(deadline_in_ms(3000)).ok());
  CHECK(out == sent[0]);
  CHECK(n6->stats().bad_frames == 0);
}

TEST_CASE("TLS: a certificate from another CA is rejected, honest peers carry on") {
  HonestPair p(false);
  const std::string other = testing::cert_dir("ca2");
  const std::unique_ptr<Transport> bad =
      p.start_rejected(node_options(4, HonestPair::kParams, false, {{6, p.n6->port()}}, other));
  CHECK(p.exchange_ok(0));
}

TEST_CASE("TLS: a valid certificate for a node that is not a neighbour is rejected") {
  HonestPair p(false);
  const std::unique_ptr<Transport> bad =
      p.start_rejected(node_options(3, HonestPair::kParams, false, {{6, p.n6->port()}}));
  CHECK(p.n6->connected_peers() == std::vector<int>{5});
  CHECK(p.exchange_ok(0));
}

TEST_CASE("TLS: a neighbour with another topology fingerprint is refused at Hello") {
  HonestPair p(false);
  auto o = node_options(4, HonestPair::kParams, false, {{6, p.n6->port()}});
  o.self.topology_fingerprint ^= 1;
  const std::unique_ptr<Transport> bad = p.start_rejected(o);
  // The dialer learns why from the HelloAck and counts it as well.
  CHECK(eventually([&] { return bad->stats().handshakes_rejected >= 1; }));
  CHECK(p.exchange_ok(0));
}

TEST_CASE("insecure: a neighbour with another job id is refused at Hello") {
  HonestPair p(true);
  auto o = node_options(4, HonestPair::kParams, true, {{6, p.n6->port()}});
  o.self.job_id = "another-job";
  const std::unique_ptr<Transport> bad = p.start_rejected(o);
  CHECK(p.exchange_ok(0));
}

TEST_CASE("insecure: a hostile Hello's strings reach the log escaped, on one line") {
  HonestPair p(true);
  // The node's stderr (where GOSSIP_LOG writes) goes to a file while the hostile peer talks.
  char path[] = "/tmp/gossip_log_forge_XXXXXX";
  const int fd = ::mkstemp(path);
  REQUIRE(fd >= 0);
  std::fflush(stderr);
  const int saved = ::dup(STDERR_FILENO);
  ::dup2(fd, STDERR_FILENO);
  const std::string evil = "job\nW 00:00:00.000 [node 6] forged line\x1b[2J\xc2\x9b";
  {
    testing::RawClient raw;
    REQUIRE(raw.connect(p.n6->port()));
    CHECK_FALSE(raw.handshake({evil, 4, testing::kTopology, HonestPair::kParams}));
  }
  CHECK(eventually([&] { return p.n6->stats().handshakes_rejected >= 1; }));
  std::fflush(stderr);
  ::dup2(saved, STDERR_FILENO);
  ::close(saved);
  ::close(fd);
  std::ifstream in(path);
  const std::string log((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ::unlink(path);
  INFO("log: ", log);
  CHECK(log.find("job id mismatch") != std::string::npos);
  CHECK(log.find("\\nW 00:00:00.000 [node 6] forged line\\x1b[2J\\xc2\\x9b") != std::string::npos);
  CHECK(log.find("\nW 00:00:00.000 [node 6] forged") == std::string::npos);
  bool control_bytes = false;
  for (char c : log) {
    const unsigned char u = static_cast<unsigned char>(c);
    control_bytes |= (u < 0x20 && u != '\n') || u == 0x7f;
  }
  CHECK_FALSE(control_bytes);
  CHECK(p.exchange_ok(0));  // the honest link carries on
}

TEST_CASE("plaintext against a TLS node is rejected") {
  HonestPair p(false);
  const std::unique_ptr<Transport> bad =
      p.start_rejected(node_options(4, HonestPair::kParams, true, {{6, p.n6->port()}}));
  testing::RawClient raw;  // and a hand-written plaintext Hello
  REQUIRE(raw.connect(p.n6->port()));
  CHECK(!raw.handshake({testing::kJob, 4, testing::kTopology, HonestPair::kParams}));
  CHECK(p.exchange_ok(0));
}

TEST_CASE("insecure: frame violations are rejected and the honest exchange carries on") {
  HonestPair p(true);
  const std::uint64_t n = HonestPair::kParams;
  const Identity four{testing::kJob, 4, testing::kTopology, n};
  const auto x4 = pattern(4, 0, n);

  // Node 6 runs one iteration with honest 5 and (whatever claims to be) 4.
  auto run_iteration = [&](std::uint64_t it, auto&& attack) {
    std::vector<float> from5(n), from4(n);
    const auto x6 = pattern(6, it, n), x5 = pattern(5, it, n);
    std::vector<float> r5(n);
    const int to5[] = {5}, to6[] = {6};
    const RecvSpec spec6[] = {{5, from5}, {4, from4}};
    const RecvSpec spec5[] = {{6, r5}};
    auto e6 = p.n6->exchange(it, x6, to5, spec6);
    auto e5 = p.n5->exchange(it, x5, to6, spec5);
    attack();
    ExchangeResult r6 = e6->wait(deadline_in_ms(1500));
    CHECK(e5->wait(deadline_in_ms(1500)).ok());
    CHECK(from5 == x5);
    CHECK(r5 == x6);
    return r6;
  };
  // Node 4's Params of iteration `it`, its first chunk, without a checksum field.
  auto params_of_4 = [&](std::uint64_t it) {
    pb::Params pm;
    pm.set_sender(4);
    pm.set_iteration(it);
    pm.set_chunk_index(0);
    pm.set_chunk_count(static_cast<std::uint32_t>((n * 4 + 4095) / 4096));
    pm.set_byte_offset(0);
    return pm;
  };
  auto params_frame = [&](std::uint64_t it, std::uint32_t crc, std::uint64_t len) {
    pb::Params pm = params_of_4(it);
    pm.set_crc32c(crc);
    return encode_frame(FrameType::kParams, pm, len);
  };
  // run_iteration(0) with a raw client that connects to 6 and handshakes as 4, then `attack(raw)`.
  auto attack_as_4 = [&](auto&& attack) {
    testing::RawClient raw;
    return run_iteration(0, [&] {
      REQUIRE(raw.connect(p.n6->port()));
      REQUIRE(raw.handshake(four));
      attack(raw);
    });
  };

  SUBCASE("oversized header") {
    ExchangeResult r = attack_as_4([&](testing::RawClient& raw) {
      const auto h = encode_frame_header({FrameType::kParams, 1u << 30, 4096});
      raw.write(h.data(), h.size());
      CHECK(raw.closed_by_peer(2000));
    });
    CHECK(p.n6->stats().bad_frames == 1);
    REQUIRE(r.failures.size() == 1);
    CHECK(r.failures[0].peer == 4);
  }
  SUBCASE("oversized payload") {
    ExchangeResult r = attack_as_4([&](testing::RawClient& raw) {
      raw.write(params_frame(0, 0, n * 4 + 4));
      CHECK(raw.closed_by_peer(2000));
    });
    CHECK(p.n6->stats().bad_frames == 1);
    REQUIRE(r.failures.size() == 1);
  }
  SUBCASE("truncated frame: half a payload, then the connection closes") {
    ExchangeResult r = attack_as_4([&](testing::RawClient& raw) {
      raw.write(params_frame(0, crc32c(x4.data(), 4096), 4096));
      raw.write(x4.data(), 2000);
      raw.close();
    });
    REQUIRE(r.failures.size() == 1);
    CHECK(r.failures[0].peer == 4);
    CHECK(r.failures[0].status.code() == StatusCode::kUnavailable);
  }
  SUBCASE("truncated message: header_len covers bytes that are not a Params") {
    ExchangeResult r = attack_as_4([&](testing::RawClient& raw) {
      std::string f = params_frame(0, 0, 4096);
      f.resize(f.size() - 1);  // last byte of the message missing ...
      const auto h = encode_frame_header(
          {FrameType::kParams, static_cast<std::uint32_t>(f.size() - kFrameHeaderBytes), 4096});
      std::memcpy(f.data(), h.data(), h.size());  // ... and the header agrees
      raw.write(f);
      CHECK(raw.closed_by_peer(2000));
    });
    CHECK(p.n6->stats().bad_frames == 1);
    REQUIRE(r.failures.size() == 1);
  }
  SUBCASE("corrupted payload is caught by the checksum") {
    ExchangeResult r = attack_as_4([&](testing::RawClient& raw) {
      std::vector<float> corrupt(x4.begin(), x4.begin() + 1024);
      raw.write(params_frame(0, crc32c(corrupt.data(), 4096), 4096));
      reinterpret_cast<std::uint8_t*>(corrupt.data())[77] ^= 0x04;
      raw.write(corrupt.data(), 4096);
      CHECK(raw.closed_by_peer(2000));
    });
    CHECK(p.n6->stats().bad_frames == 1);
    REQUIRE(r.failures.size() == 1);
    CHECK(r.failures[0].peer == 4);
    CHECK(r.failures[0].status.code() == StatusCode::kUnavailable);
    CHECK(r.failures[0].status.message().find("checksum") != std::string::npos);
  }
  SUBCASE("a Params frame without a checksum on a plaintext link") {
    ExchangeResult r = attack_as_4([&](testing::RawClient& raw) {
      pb::Params pm = params_of_4(0);
      pm.set_crc32c_omitted(true);
      raw.write(encode_frame(FrameType::kParams, pm, 4096));
      raw.write(x4.data(), 4096);
      CHECK(raw.closed_by_peer(2000));
    });
    CHECK(p.n6->stats().bad_frames == 1);
    CHECK(p.n6->stats().unchecksummed_chunks == 0);
    REQUIRE(r.failures.size() == 1);
    CHECK(r.failures[0].peer == 4);
    CHECK(r.failures[0].status.message().find("without a payload checksum") != std::string::npos);
  }
  SUBCASE("a Params frame before the handshake") {
    testing::RawClient raw;
    REQUIRE(raw.connect(p.n6->port()));
    raw.write(params_frame(0, 0, 4096));
    CHECK(raw.closed_by_peer(2000));
    CHECK(p.n6->stats().handshakes_rejected == 1);
    CHECK(p.exchange_ok(0));
  }
  // After every attack the honest pair still exchanges.
  CHECK(p.exchange_ok(1));
}

// Calls `visit(fd)` for every open descriptor of this process (sockets among them).
static void for_each_fd(const std::function<void(int)>& visit) {
  for (const auto& e : std::filesystem::directory_iterator("/proc/self/fd")) {
    visit(std::atoi(e.path().filename().c_str()));
  }
}

// TCP_NOTSENT_LOWAT of every socket of this process that has one set (> 0).
static std::vector<int> notsent_lowats() {
  std::vector<int> out;
  for_each_fd([&](int fd) {
    int v = 0;
    socklen_t len = sizeof v;
    if (::getsockopt(fd, IPPROTO_TCP, TCP_NOTSENT_LOWAT, &v, &len) == 0 && v > 0) out.push_back(v);
  });
  return out;
}

// Nodes 6 and 5 linked over loopback, both with the options `configure` sets; connected.
struct LinkedPair {
  std::unique_ptr<Transport> t6, t5;
};
static LinkedPair linked_pair(const std::function<void(TransportOptions&)>& configure) {
  auto o6 = node_options(6, 100, true, {{5, 0}});
  configure(o6);
  auto t6 = Transport::start(o6);
  REQUIRE(t6.is_ok());
  auto o5 = node_options(5, 100, true, {{6, (*t6)->port()}});
  configure(o5);
  auto t5 = Transport::start(o5);
  REQUIRE(t5.is_ok());
  const int want5[] = {5}, want6[] = {6};
  REQUIRE((*t6)->wait_connected(want5, deadline_in_ms(5000)));
  REQUIRE((*t5)->wait_connected(want6, deadline_in_ms(5000)));
  return {std::move(*t6), std::move(*t5)};
}

TEST_CASE("both ends of a link set TCP_NOTSENT_LOWAT to notsent_lowat_bytes, 0 sets none") {
  for (const std::uint32_t lowat : {65536u, 0u}) {
    CAPTURE(lowat);
    const LinkedPair link =
        linked_pair([&](TransportOptions& o) { o.notsent_lowat_bytes = lowat; });
    const std::vector<int> set = notsent_lowats();
    CHECK(std::count(set.begin(), set.end(), 65536) == (lowat == 0 ? 0 : 2));
  }
}

// The TCP congestion control of every TCP socket of this process, by name.
static std::vector<std::string> congestion_controls() {
  std::vector<std::string> out;
  for_each_fd([&](int fd) {
    char name[32] = {};
    socklen_t len = sizeof name;
    if (::getsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, name, &len) == 0) out.emplace_back(name);
  });
  return out;
}

TEST_CASE(
    "both ends of a link use congestion_control, and one this process may not use is refused") {
  // One this process may use that is not the host's default (which every other socket has), so
  // that the count below can only come from the option.
  std::string host_default, allowed_line;
  std::getline(std::ifstream("/proc/sys/net/ipv4/tcp_congestion_control"), host_default);
  std::getline(std::ifstream("/proc/sys/net/ipv4/tcp_allowed_congestion_control"), allowed_line);
  std::istringstream allowed(allowed_line);
  std::string cc;
  while (allowed >> cc && cc == host_default) {
  }
  if (cc.empty() || cc == host_default) {
    MESSAGE("only the host's default congestion control is allowed here; nothing to tell apart");
    return;
  }
  CAPTURE(cc);
  const LinkedPair link = linked_pair([&](TransportOptions& o) { o.congestion_control = cc; });
  const std::vector<std::string> ccs = congestion_controls();
  CHECK(std::count(ccs.begin(), ccs.end(), cc) == 2);  // the link's two ends, nothing else

  auto bad = node_options(7, 100, true, {});
  bad.congestion_control = "no_such_cc";
  auto refused = Transport::start(bad);
  REQUIRE_FALSE(refused.is_ok());
  CHECK(refused.status().code() == StatusCode::kInvalidArgument);
  CHECK(refused.status().message().find("'no_such_cc'") != std::string::npos);
  CHECK(refused.status().message().find("may choose: ") != std::string::npos);
  CHECK(check_congestion_control(cc).is_ok());
}

TEST_CASE(
    "link.congestion_control auto replaces a BBR host default by CUBIC or Reno, else keeps it") {
  std::string host_default;
  std::getline(std::ifstream("/proc/sys/net/ipv4/tcp_congestion_control"), host_default);
  CAPTURE(host_default);
  const auto automatic = choose_congestion_control("auto");
  REQUIRE(automatic.is_ok());
  if (host_default.rfind("bbr", 0) == 0) {
    // The first of cubic, reno that this process may set; reno is always allowed.
    const std::string expected = check_congestion_control("cubic").is_ok() ? "cubic" : "reno";
    CHECK(automatic->name == expected);
    CHECK(automatic->reason.find(expected + " in place of the host's " + host_default) !=
          std::string::npos);
  } else {
    CHECK(automatic->name.empty());  // the host's default, kept
    CHECK(automatic->reason.find("(" + host_default + ")") != std::string::npos);
  }
  for (const char* host : {"host", ""}) {
    const auto kept = choose_congestion_control(host);
    REQUIRE(kept.is_ok());
    CHECK(kept->name.empty());
  }
  const auto named = choose_congestion_control("reno");
  REQUIRE(named.is_ok());
  CHECK(named->name == "reno");
  const auto refused = choose_congestion_control("no_such_cc");
  REQUIRE_FALSE(refused.is_ok());
  CHECK(refused.status().message().find("'no_such_cc'") != std::string::npos);
}

TEST_CASE("TLS links carry Params without a CRC32C, plaintext links keep it") {
  for (const bool insecure : {false, true}) {
    CAPTURE(insecure);
    HonestPair p(insecure);
    // Both Hellos say whether the node takes unchecksummed Params: TLS nodes only.
    const auto h5 = p.n6->peer_hello(5), h6 = p.n5->peer_hello(6);
    REQUIRE(h5.has_value());
    REQUIRE(h6.has_value());
    CHECK(h5->payload_crc_optional() == !insecure);
    CHECK(h6->payload_crc_optional() == !insecure);
    for (std::uint64_t it = 0; it < 5; ++it) CHECK(p.exchange_ok(it));
    const std::uint64_t chunks = 5 * ((HonestPair::kParams * 4 + 4095) / 4096);
    CHECK(p.n6->stats().unchecksummed_chunks == (insecure ? 0 : chunks));
    CHECK(p.n5->stats().unchecksummed_chunks == (insecure ? 0 : chunks));
    CHECK(p.n6->stats().bad_frames == 0);
  }
}

TEST_CASE("TLS: 12 MB buffers both ways, records beyond the write-behind buffer, byte-exact") {
  // 4 MiB chunks: each frame is far more than the 1 MiB the CoalescingStream may buffer, so the
  // synchronous record writes run out of room and wait, and the reader runs out of records and
  // waits, many times per iteration.
  const std::uint64_t params = 3'000'000;
  auto o1 = node_options(1, params, false, {{0, 0}});
  o1.chunk_bytes = std::size_t{4} << 20;
  auto t1 = Transport::start(o1);
  REQUIRE_MESSAGE(t1.is_ok(), t1.status().to_string());
  auto o0 = node_options(0, params, false, {{1, (*t1)->port()}});
  o0.chunk_bytes = std::size_t{4} << 20;
  auto t0 = Transport::start(o0);
  REQUIRE_MESSAGE(t0.is_ok(), t0.status().to_string());
  std::vector<float> r0(params), r1(params);
  for (std::uint64_t it = 0; it < 3; ++it) {
    const auto x0 = pattern(0, it, params), x1 = pattern(1, it, params);
    const int to1[] = {1}, to0[] = {0};
    const RecvSpec s0[] = {{1, r0}}, s1[] = {{0, r1}};
    auto e0 = (*t0)->exchange(it, x0, to1, s0);
    auto e1 = (*t1)->exchange(it, x1, to0, s1);
    const ExchangeResult a = e0->wait(deadline_in_ms(30000)), b = e1->wait(deadline_in_ms(30000));
    CHECK(a.ok());
    CHECK(b.ok());
    CHECK(std::memcmp(r0.data(), x1.data(), params * 4) == 0);
    CHECK(std::memcmp(r1.data(), x0.data(), params * 4) == 0);
  }
  CHECK((*t0)->stats().bytes_received == 3 * params * 4);
  CHECK((*t1)->stats().unchecksummed_chunks == 3 * 3);
}

TEST_CASE("a silent neighbour is reported at the deadline instead of blocking") {
  // Node 1 expects 0 and 2; node 2 is connected but never posts its iteration.
  const std::uint64_t n = 1000;
  auto t2 = Transport::start(node_options(2, n, false, {{1, 0}}));
  REQUIRE(t2.is_ok());
  auto t1 = Transport::start(node_options(1, n, false, {{0, 0}, {2, (*t2)->port()}}));
  REQUIRE(t1.is_ok());
  auto t0 = Transport::start(node_options(0, n, false, {{1, (*t1)->port()}}));
  REQUIRE(t0.is_ok());
  const int all[] = {0, 2};
  REQUIRE((*t1)->wait_connected(all, deadline_in_ms(5000)));
  std::vector<float> from0(n), from2(n), r0(n);
  const auto x1 = pattern(1, 0, n), x0 = pattern(0, 0, n);
  const RecvSpec spec1[] = {{0, from0}, {2, from2}};
  const RecvSpec spec0[] = {{1, r0}};
  const int to1[] = {1};
  auto e0 = (*t0)->exchange(0, x0, to1, spec0);
  const auto start = Clock::now();
  auto e1 = (*t1)->exchange(0, x1, all, spec1);
  ExchangeResult r = e1->wait(deadline_in_ms(500));
  const double waited_ms = std::chrono::duration<double, std::milli>(Clock::now() - start).count();
  CHECK(waited_ms >= 450);
  CHECK(waited_ms < 3000);
  REQUIRE(r.failures.size() == 1);
  CHECK(r.failures[0].peer == 2);
  CHECK(r.failures[0].status.code() == StatusCode::kDeadlineExceeded);
  CHECK(from0 == x0);
  CHECK(e0->wait(deadline_in_ms(2000)).ok());
  CHECK(r0 == x1);
}

TEST_CASE("a link that goes quiet (no heartbeat) is dropped after peer_timeout_ms") {
  HonestPair p(true, /*peer_timeout_ms=*/300);
  testing::RawClient raw;
  REQUIRE(raw.connect(p.n6->port()));
  REQUIRE(raw.handshake({testing::kJob, 4, testing::kTopology, HonestPair::kParams}));
  CHECK(eventually([&] { return p.n6->stats().links_timed_out >= 1; }, 3000));
  CHECK(raw.closed_by_peer(1000));
  // The honest neighbour sends heartbeats, so it stays. (The raw client sees the socket close a
  // moment before node 6's io thread takes node 4 off its list: wait for the list to settle.)
  CHECK(eventually([&] { return p.n6->connected_peers() == std::vector<int>{5}; }, 1000));
  CHECK(p.exchange_ok(0));
}

TEST_CASE("shutdown says Goodbye, the neighbour's pending receive fails at once") {
  HonestPair p(false);
  std::vector<float> out(HonestPair::kParams);
  const RecvSpec spec[] = {{5, out}};
  auto e = p.n6->exchange(0, {}, {}, spec);
  const auto start = Clock::now();
  p.n5->shutdown();
  ExchangeResult r = e->wait(deadline_in_ms(5000));
  CHECK(Clock::now() - start < std::chrono::milliseconds(2000));
  REQUIRE(r.failures.size() == 1);
  INFO(r.failures[0].status.to_string());
  CHECK(r.failures[0].status.message().find("goodbye") != std::string::npos);
  CHECK(eventually([&] { return p.n6->connected_peers().empty(); }));
}

TEST_CASE(
    "a neighbour one iteration ahead that says Goodbye: its staged last iteration still arrives") {
  // End of a run: node 5 finishes its last iteration (1) while node 6 is still at 0, so node 5's
  // iteration-1 data sits in node 6's staging when node 5 shuts down. The receive node 6 posts
  // for iteration 1 after the Goodbye must get that data, not wait out its deadline (this once
  // failed 1 run in ~90 of 8 gossipd processes on the exponential graph).
  for (bool insecure : {true, false}) {
    CAPTURE(insecure);
    HonestPair p(insecure);
    const std::uint64_t n = HonestPair::kParams;
    const std::vector<float> first = pattern(5, 0, n), last = pattern(5, 1, n);
    std::atomic<int> sends_ok{0};
    p.n5->send(6, 0, first, [&](Status s) { sends_ok += s.is_ok(); });
    p.n5->send(6, 1, last, [&](Status s) { sends_ok += s.is_ok(); });
    REQUIRE(eventually([&] { return sends_ok == 2; }));
    std::vector<float> out(n);
    const RecvSpec spec[] = {{5, out}};
    CHECK(p.n6->exchange(0, {}, {}, spec)->wait(deadline_in_ms(3000)).ok());
    CHECK(out == first);
    std::this_thread::sleep_for(std::chrono::milliseconds(50));  // iteration 1 into staging
    p.n5->shutdown();
    REQUIRE(eventually([&] { return p.n6->connected_peers().empty(); }));
    std::fill(out.begin(), out.end(), 0.0f);
    const auto start = Clock::now();
    ExchangeResult r = p.n6->exchange(1, {}, {}, spec)->wait(deadline_in_ms(3000));
    CHECK(Clock::now() - start < std::chrono::milliseconds(1000));
    CHECK_MESSAGE(r.ok(), (r.failures.empty() ? "" : r.failures[0].status.to_string()));
    CHECK(out == last);
    // Nothing more was sent: the iteration after gets nothing (its deadline passes).
    ExchangeResult next = p.n6->exchange(2, {}, {}, spec)->wait(deadline_in_ms(200));
    CHECK(next.failures.size() == 1);
  }
}

TEST_CASE("control messages: opaque bytes in order, held until a handler is set, bounded") {
  std::mutex mu;  // before the pair: the handler may run until the transports are shut down
  std::vector<std::pair<int, std::string>> got;
  HonestPair p(/*insecure=*/true);
  // Before node 6 has a handler: more than it holds; the first is not text at all.
  const std::size_t sent = Transport::kMaxHeldControl + 3;
  const std::string binary("\0\xff\xfe\n", 4);
  for (std::size_t k = 0; k < sent; ++k) p.n5->send_control(6, k == 0 ? binary : std::to_string(k));
  // Frames on a link arrive in order: once iteration 0's data is in, so are the control messages.
  REQUIRE(p.exchange_ok(0));
  CHECK(p.n6->stats().control_dropped == 3);

  p.n6->set_control_handler([&](int peer, std::string_view control) {
    std::lock_guard l(mu);
    got.emplace_back(peer, std::string(control));
    return control == "refuse" ? corruption("not ours") : Status::ok();
  });
  auto count = [&] {
    std::lock_guard l(mu);
    return got.size();
  };
  REQUIRE(eventually([&] { return count() == Transport::kMaxHeldControl; }));
  {
    std::lock_guard l(mu);
    CHECK(got[0] == std::pair<int, std::string>(5, binary));
    bool in_order = true;
    for (std::size_t k = 1; k < got.size(); ++k) in_order &= got[k].second == std::to_string(k);
    CHECK(in_order);
  }
  // With a handler set, a message goes to it directly.
  p.n5->send_control(6, "after");
  REQUIRE(eventually([&] { return count() == Transport::kMaxHeldControl + 1; }));
  {
    std::lock_guard l(mu);
    CHECK(got.back().second == "after");
  }
  // A message the handler refuses is a bad frame: the link is closed (and dialed again).
  const std::uint64_t bad_before = p.n6->stats().bad_frames;
  const std::uint64_t links_before = p.n5->stats().connections_established;
  p.n5->send_control(6, "refuse");
  CHECK(eventually([&] { return p.n6->stats().bad_frames == bad_before + 1; }));
  CHECK(eventually([&] { return p.n5->stats().connections_established > links_before; }));
  CHECK(p.n6->stats().control_dropped == 3);
}

TEST_CASE("start() refuses bad options with a clear message") {
  auto o = node_options(1, 100, true, {{1, 0}});
  CHECK(Transport::start(o).status().message().find("neighbour id 1") != std::string::npos);
  o = node_options(1, 100, true, {{2, 0}});  // node 1 dials 2 and needs its port
  CHECK(Transport::start(o).status().message().find("host:port") != std::string::npos);
  o = node_options(1, 100, false, {});
  o.tls.key_file = "/nonexistent.key";
  CHECK(Transport::start(o).status().code() == StatusCode::kNotFound);
}

}  // namespace gossip::net

namespace gossip::net {

TEST_CASE("two nodes, both ways, single-chunk buffers, back to back for 300 iterations") {
  // Each buffer is one chunk, so a node routinely receives iteration t+1 before it has posted it.
  const std::vector<std::vector<int>> g = {{1}, {0}};
  const std::uint64_t params = 1000;
  auto nodes = start_cluster(g, params, true);
  Counters c;
  std::thread a([&] { run_node(*nodes[0], g[0], params, 300, c); });
  std::thread b([&] { run_node(*nodes[1], g[1], params, 300, c); });
  a.join();
  b.join();
  CHECK(c.failures == 0);
  CHECK(c.mismatches == 0);
  CHECK(c.bad_events == 0);
}

}  // namespace gossip::net

namespace gossip::net {

TEST_CASE("IPv6 literal and host name addresses") {
  const std::uint64_t n = 500;
  auto o2 = node_options(2, n, true, {{0, 0}});
  o2.listen_host = "::1";
  auto t2 = Transport::start(o2);
  if (!t2.is_ok()) {
    MESSAGE("no IPv6 loopback here: " << t2.status().to_string());
    return;
  }
  auto t1 = Transport::start(node_options(1, n, true, {{0, 0}}));
  REQUIRE(t1.is_ok());
  auto o0 = node_options(0, n, true, {});
  o0.neighbours = {{1, "localhost", (*t1)->port()}, {2, "::1", (*t2)->port()}};
  auto t0 = Transport::start(o0);
  REQUIRE(t0.is_ok());
  const int both[] = {1, 2};
  CHECK((*t0)->wait_connected(both, deadline_in_ms(5000)));
  std::vector<float> from1(n), from2(n);
  const RecvSpec specs[] = {{1, from1}, {2, from2}};
  auto e0 = (*t0)->exchange(0, {}, {}, specs);
  const auto x1 = pattern(1, 0, n), x2 = pattern(2, 0, n);
  const int to0[] = {0};
  auto e1 = (*t1)->exchange(0, x1, to0, {});
  auto e2 = (*t2)->exchange(0, x2, to0, {});
  CHECK(e0->wait(deadline_in_ms(5000)).ok());
  CHECK(e1->wait(deadline_in_ms(5000)).ok());
  CHECK(e2->wait(deadline_in_ms(5000)).ok());
  CHECK(from1 == x1);
  CHECK(from2 == x2);
}

}  // namespace gossip::net

namespace gossip::net {

// The transport keeps a weak handle of every exchange for shutdown. Each one pins its
// ExchangeState's allocation (make_shared), so handles that are never pruned grow the process by
// a few hundred bytes per iteration for the whole run. The gauge must stay bounded (at most twice
// the live exchanges plus 64), however many iterations pass; an exchange with nothing to send or
// receive (a node alone) never reaches the io thread, so nothing of it is kept or queued there.
TEST_CASE("exchanges tracked for shutdown stay bounded: 20000 iterations alone, 3000 in a pair") {
  constexpr std::uint64_t kBound = 2 * 1 + 64;
  {
    auto t = Transport::start(node_options(0, 16, true, {}));
    REQUIRE(t.is_ok());
    for (std::uint64_t it = 0; it < 20000; ++it) {
      auto ex = (*t)->exchange(it, {}, {}, {});
      REQUIRE(ex->wait(deadline_in_ms(1000)).ok());
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));  // let a queued one be seen
    CHECK((*t)->stats().exchanges_tracked == 0);
  }
  const std::vector<std::vector<int>> g = {{1}, {0}};
  auto nodes = start_cluster(g, 100, true);
  Counters c;
  std::thread a([&] { run_node(*nodes[0], g[0], 100, 3000, c); });
  std::thread b([&] { run_node(*nodes[1], g[1], 100, 3000, c); });
  a.join();
  b.join();
  CHECK(c.failures == 0);
  CHECK(c.mismatches == 0);
  for (auto& n : nodes) {
    const std::uint64_t tracked = n->stats().exchanges_tracked;
    CHECK(tracked > 0);
    CHECK(tracked <= kBound);
  }
}

}  // namespace gossip::net

namespace gossip::net {
namespace {

// Everything written to stderr (where GOSSIP_LOG writes) between construction and text().
class StderrCapture {
 public:
  StderrCapture() {
    fd_ = ::mkstemp(path_);
    REQUIRE(fd_ >= 0);
    std::fflush(stderr);
    saved_ = ::dup(STDERR_FILENO);
    ::dup2(fd_, STDERR_FILENO);
  }
  ~StderrCapture() { restore(); }
  std::string text() {
    restore();
    std::ifstream in(path_);
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  }

 private:
  void restore() {
    if (saved_ < 0) return;
    std::fflush(stderr);
    ::dup2(saved_, STDERR_FILENO);
    ::close(saved_);
    ::close(fd_);
    saved_ = -1;
  }
  char path_[32] = "/tmp/gossip_net_log_XXXXXX";
  int fd_ = -1;
  int saved_ = -1;
};

std::size_t occurrences(const std::string& text, const std::string& what) {
  std::size_t n = 0;
  for (auto at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

}  // namespace

TEST_CASE("neighbours that cannot be reached are named with host:port and cause, logged once") {
  // A port nobody listens on: bound, then closed again.
  std::uint16_t closed_port = 0;
  {
    asio::io_context io;
    asio::ip::tcp::acceptor a(io, {asio::ip::address_v4::loopback(), 0});
    closed_port = a.local_endpoint().port();
  }
  // Node 5 dials 6 (a name that never resolves: RFC 2606 reserves .invalid) and 7 (refused);
  // node 4 would dial node 5 and never does.
  auto o = node_options(5, 100, true, {{4, 0}});
  o.neighbours.push_back({6, "nonexistent.invalid", 7000});
  o.neighbours.push_back({7, "127.0.0.1", closed_port});
  o.connect_backoff_initial_ms = 10;
  o.connect_backoff_max_ms = 50;
  std::string log, unconnected;
  {
    StderrCapture capture;
    auto t = Transport::start(o);
    REQUIRE(t.is_ok());
    const int all[] = {4, 6, 7};
    // Both failures seen (a resolver without a reachable DNS server may take seconds), then
    // another 0.5 s at a backoff of at most 50 ms: node 7 is dialed ~10 more times.
    CHECK(eventually(
        [&] {
          unconnected = (*t)->describe_unconnected(all);
          return unconnected.find("cannot resolve") != std::string::npos &&
                 unconnected.find("Connection refused") != std::string::npos;
        },
        30000));
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    unconnected = (*t)->describe_unconnected(all);
    (*t)->shutdown();
    log = capture.text();
  }
  INFO("log: ", log);
  INFO("describe_unconnected: ", unconnected);
  CHECK(occurrences(log,
                    "cannot reach neighbour node 6 at nonexistent.invalid:7000: cannot "
                    "resolve nonexistent.invalid") == 1);
  CHECK(occurrences(log, "cannot reach neighbour node 7 at 127.0.0.1:" +
                             std::to_string(closed_port) + ": cannot connect") == 1);
  CHECK(occurrences(log, "Connection refused") == 1);
  CHECK(occurrences(log, "neighbour node 4") == 0);  // it dials us: nothing to say yet
  CHECK(unconnected.find("node 4 (it dials this node): no connection from it yet") !=
        std::string::npos);
  CHECK(unconnected.find("node 6 at nonexistent.invalid:7000: cannot resolve "
                         "nonexistent.invalid") != std::string::npos);
  CHECK(unconnected.find("node 7 at 127.0.0.1:" + std::to_string(closed_port) +
                         ": cannot connect to node 7") != std::string::npos);
  CHECK(unconnected.find("Connection refused") != std::string::npos);
}

}  // namespace gossip::net
