// CoalescingStream (net/coalescing_stream.h), the layer under asio::ssl::stream on TLS links, on
// real loopback sockets in one io_context: bytes arrive exactly and in order whatever the mix of
// write and read sizes, a short write completes only once everything before it is in the kernel
// (so a shutdown right after it loses nothing), bulk writes never run more than the buffer ahead,
// errors are reported and sticky, and TLS 1.3 over it moves large buffers both ways byte-exact,
// through asio::ssl::stream and after direct_records() (records straight between OpenSSL and the
// stream: nothing lost at the switch, close_notify and a bare close told apart).
#include "net/coalescing_stream.h"

#include <doctest/doctest.h>

#include <array>
#include <asio.hpp>
#include <asio/ssl.hpp>
#include <cstring>
#include <functional>
#include <random>
#include <thread>

#include "net/tls.h"
#include "net_test_util.h"

namespace gossip::net {
namespace {

using asio::ip::tcp;

std::vector<std::uint8_t> pattern(std::size_t n, std::uint32_t seed) {
  std::vector<std::uint8_t> v(n);
  std::mt19937 rng(seed);
  for (auto& b : v) b = static_cast<std::uint8_t>(rng());
  return v;
}

// Connects `a` (a CoalescingStream's socket or a plain socket) to `b` over loopback.
void connect_pair(asio::io_context& io, tcp::socket& a, tcp::socket& b) {
  tcp::acceptor acc(io, {asio::ip::address_v4::loopback(), 0});
  a.connect(acc.local_endpoint());
  acc.accept(b);
}

// The TLS contexts of nodes 1 and 2 from the test certificates.
std::array<std::shared_ptr<asio::ssl::context>, 2> node_contexts() {
  const std::string dir = testing::cert_dir();
  REQUIRE(!dir.empty());
  auto ctx1 = make_tls_context(testing::tls_for(dir, 1));
  auto ctx2 = make_tls_context(testing::tls_for(dir, 2));
  REQUIRE(ctx1.is_ok());
  REQUIRE(ctx2.is_ok());
  return {*ctx1, *ctx2};
}

// Connects two TLS streams over loopback and runs both handshakes (a is the client).
void handshake_pair(asio::io_context& io, TlsStream& a, TlsStream& b) {
  connect_pair(io, tls_socket(a), tls_socket(b));
  int handshakes = 0;
  a.async_handshake(asio::ssl::stream_base::client, [&](const asio::error_code& ec) {
    REQUIRE_FALSE(ec);
    ++handshakes;
  });
  b.async_handshake(asio::ssl::stream_base::server, [&](const asio::error_code& ec) {
    REQUIRE_FALSE(ec);
    ++handshakes;
  });
  io.run();
  io.restart();
  REQUIRE(handshakes == 2);
}

// Small kernel buffers so that sends are partial and the background writer has to queue.
void small_buffers(tcp::socket& s) {
  s.set_option(asio::socket_base::send_buffer_size(16 * 1024));
  s.set_option(asio::socket_base::receive_buffer_size(16 * 1024));
}

// Reads `r` to EOF in pieces of random size (1 byte .. 200 KiB) into `out`.
template <typename Stream>
void read_to_eof(Stream& r, std::vector<std::uint8_t>& out, std::mt19937& rng,
                 std::function<void(const asio::error_code&)> done) {
  const std::size_t n = std::uniform_int_distribution<std::size_t>(1, 200 * 1024)(rng);
  auto buf = std::make_shared<std::vector<std::uint8_t>>(n);
  r.async_read_some(
      asio::buffer(*buf), [&r, &out, &rng, buf, done](const asio::error_code& ec, std::size_t got) {
        out.insert(out.end(), buf->begin(), buf->begin() + static_cast<std::ptrdiff_t>(got));
        if (ec) {
          done(ec);
          return;
        }
        read_to_eof(r, out, rng, done);
      });
}

TEST_CASE("coalescing stream: interleaved small and large writes arrive byte-exact and in order") {
  for (std::size_t cap : {std::size_t{64 * 1024}, CoalescingStream::kDefaultWriteBuffer}) {
    CAPTURE(cap);
    asio::io_context io;
    CoalescingStream w(io, CoalescingStream::kDefaultReadChunk, cap);
    tcp::socket r(io);
    connect_pair(io, w.socket(), r);
    small_buffers(w.socket());
    small_buffers(r);
    // Sizes around the full-record threshold, tiny frames and large blocks.
    const std::size_t sizes[] = {1,
                                 7,
                                 100,
                                 CoalescingStream::kFullRecord - 1,
                                 CoalescingStream::kFullRecord,
                                 CoalescingStream::kFullRecord + 1,
                                 65536,
                                 300000,
                                 1 << 20};
    std::mt19937 rng(7);
    std::vector<std::size_t> plan;
    std::size_t total = 0;
    while (total < (12u << 20)) {
      plan.push_back(sizes[rng() % std::size(sizes)]);
      total += plan.back();
    }
    const auto data = pattern(total + 1, 1);
    std::size_t off = 0, k = 0, violations = 0;
    std::function<void()> next = [&] {
      if (k == plan.size()) {
        // The last byte as a short write: once it completes, all is in the kernel (a bulk
        // record completes while it may still be buffered) and the socket may be shut down.
        w.async_write_some(asio::buffer(data.data() + off, 1),
                           [&](const asio::error_code& ec, std::size_t) {
                             REQUIRE_FALSE(ec);
                             CHECK(w.unsent() == 0);
                             w.socket().shutdown(tcp::socket::shutdown_send);
                           });
        return;
      }
      const std::size_t n = plan[k++];
      w.async_write_some(asio::buffer(data.data() + off, n),
                         [&, n](const asio::error_code& ec, std::size_t got) {
                           REQUIRE_FALSE(ec);
                           REQUIRE(got == n);  // every write is taken whole
                           off += n;
                           if (n < CoalescingStream::kFullRecord && w.unsent() != 0) ++violations;
                           if (w.unsent() > cap) ++violations;
                           next();
                         });
    };
    next();
    std::vector<std::uint8_t> got;
    asio::error_code end;
    read_to_eof(r, got, rng, [&](const asio::error_code& ec) { end = ec; });
    io.run();
    CHECK(end == asio::error::eof);
    CHECK(violations == 0);
    REQUIRE(got.size() == data.size());
    CHECK(got == data);
    // Coalescing happened: fewer socket writes than writes.
    CHECK(w.socket_writes() < plan.size());
  }
}

TEST_CASE("coalescing stream: reads of any size return exactly the bytes sent") {
  asio::io_context io;
  tcp::socket w(io);
  CoalescingStream r(io, 64 * 1024);
  connect_pair(io, w, r.socket());
  const auto data = pattern(8u << 20, 2);
  asio::async_write(w, asio::buffer(data), [&](const asio::error_code& ec, std::size_t) {
    REQUIRE_FALSE(ec);
    w.shutdown(tcp::socket::shutdown_send);
  });
  std::mt19937 rng(3);
  std::vector<std::uint8_t> got;
  asio::error_code end;
  read_to_eof(r, got, rng, [&](const asio::error_code& ec) { end = ec; });
  io.run();
  CHECK(end == asio::error::eof);
  REQUIRE(got.size() == data.size());
  CHECK(got == data);
  // Far fewer socket reads than the ~80 reads of 100 KiB average the test asked for would need
  // with a 17 KiB engine buffer is not asserted (timing); but every read was served.
  CHECK(r.socket_reads() >= 1);
  // An empty read completes at once with nothing.
  bool empty_done = false;
  r.async_read_some(asio::mutable_buffer(), [&](const asio::error_code&, std::size_t n) {
    CHECK(n == 0);
    empty_done = true;
  });
  io.restart();
  io.run();
  CHECK(empty_done);
}

TEST_CASE("coalescing stream: a short write after bulk completes only when all is sent") {
  // The transport half-closes right after its Goodbye (a short write) completes; nothing written
  // before may be lost. The reader starts late so the kernel buffers fill and bulk writes queue.
  asio::io_context io;
  CoalescingStream w(io, CoalescingStream::kDefaultReadChunk, 256 * 1024);
  tcp::socket r(io);
  connect_pair(io, w.socket(), r);
  small_buffers(w.socket());
  small_buffers(r);
  const std::size_t rec = CoalescingStream::kFullRecord;
  const std::size_t records = 200;  // ~3.3 MB
  const auto data = pattern(records * rec + 10, 4);
  std::size_t k = 0;
  std::size_t max_unsent = 0;
  bool goodbye_done = false;
  std::function<void()> next = [&] {
    if (k < records) {
      w.async_write_some(asio::buffer(data.data() + k * rec, rec),
                         [&](const asio::error_code& ec, std::size_t) {
                           REQUIRE_FALSE(ec);
                           max_unsent = std::max(max_unsent, w.unsent());
                           ++k;
                           next();
                         });
      return;
    }
    asio::async_write(w, asio::buffer(data.data() + records * rec, 10),
                      [&](const asio::error_code& ec, std::size_t n) {
                        REQUIRE_FALSE(ec);
                        CHECK(n == 10);
                        CHECK(w.unsent() == 0);
                        goodbye_done = true;
                        w.socket().shutdown(tcp::socket::shutdown_send);
                      });
  };
  next();
  std::mt19937 rng(5);
  std::vector<std::uint8_t> got;
  asio::error_code end;
  asio::steady_timer later(io, std::chrono::milliseconds(100));
  later.async_wait([&](const asio::error_code&) {
    read_to_eof(r, got, rng, [&](const asio::error_code& ec) { end = ec; });
  });
  io.run();
  CHECK(goodbye_done);
  CHECK(max_unsent > 0);            // bulk writes did run ahead of the kernel ...
  CHECK(max_unsent <= 256 * 1024);  // ... but never more than the buffer
  CHECK(end == asio::error::eof);
  REQUIRE(got.size() == data.size());
  CHECK(got == data);
}

TEST_CASE("coalescing stream: a peer that closes mid-stream fails writes, and the error sticks") {
  asio::io_context io;
  CoalescingStream w(io, CoalescingStream::kDefaultReadChunk, 128 * 1024);
  tcp::socket r(io);
  connect_pair(io, w.socket(), r);
  small_buffers(w.socket());
  const auto block = pattern(CoalescingStream::kFullRecord, 6);
  asio::error_code first;
  std::size_t writes = 0;
  std::function<void()> next = [&] {
    w.async_write_some(asio::buffer(block), [&](const asio::error_code& ec, std::size_t n) {
      if (ec) {
        CHECK(n == 0);
        first = ec;
        return;
      }
      ++writes;
      REQUIRE(writes < 100000);
      next();
    });
  };
  next();
  // The peer goes away with data unread (the writer is stuck by then): its kernel resets the
  // connection.
  asio::steady_timer t(io, std::chrono::milliseconds(100));
  t.async_wait([&](const asio::error_code&) {
    CHECK(writes > 0);
    CHECK_FALSE(first);
    r.close();
  });
  io.run();
  REQUIRE(first);
  CHECK((first == asio::error::broken_pipe || first == asio::error::connection_reset));
  // Every later write fails at once with the same error; nothing is taken.
  asio::error_code again;
  std::size_t taken = 1;
  w.async_write_some(asio::buffer(block, 10), [&](const asio::error_code& ec, std::size_t n) {
    again = ec;
    taken = n;
  });
  io.restart();
  io.run();
  CHECK(again == first);
  CHECK(taken == 0);
}

TEST_CASE("coalescing stream: reads deliver what arrived before the close, then EOF") {
  asio::io_context io;
  tcp::socket w(io);
  CoalescingStream r(io);
  connect_pair(io, w, r.socket());
  const auto data = pattern(100000, 8);
  asio::write(w, asio::buffer(data));
  w.close();
  std::mt19937 rng(9);
  std::vector<std::uint8_t> got;
  asio::error_code end;
  read_to_eof(r, got, rng, [&](const asio::error_code& ec) { end = ec; });
  io.run();
  CHECK(end == asio::error::eof);
  CHECK(got == data);
}

TEST_CASE("coalescing stream: closing the socket fails the pending read and write") {
  asio::io_context io;
  CoalescingStream s(io, CoalescingStream::kDefaultReadChunk, 64 * 1024);
  tcp::socket peer(io);
  connect_pair(io, s.socket(), peer);
  small_buffers(s.socket());
  small_buffers(peer);
  asio::error_code read_ec, write_ec;
  bool read_done = false, write_done = false;
  std::vector<std::uint8_t> in(1000);
  s.async_read_some(asio::buffer(in), [&](const asio::error_code& ec, std::size_t n) {
    read_ec = ec;
    CHECK(n == 0);
    read_done = true;
  });
  // The peer never reads: a 4 MB write must end up waiting for the kernel.
  const auto data = pattern(4u << 20, 10);
  asio::async_write(s, asio::buffer(data), [&](const asio::error_code& ec, std::size_t) {
    write_ec = ec;
    write_done = true;
  });
  asio::steady_timer t(io, std::chrono::milliseconds(100));
  t.async_wait([&](const asio::error_code&) {
    CHECK_FALSE(write_done);
    CHECK(s.unsent() > 0);
    s.socket().close();
  });
  io.run();
  CHECK(read_done);
  CHECK(read_ec == asio::error::operation_aborted);
  CHECK(write_done);
  CHECK(write_ec == asio::error::operation_aborted);
}

TEST_CASE("coalescing stream: destroyed with a flush in flight, nothing leaks or dangles") {
  asio::io_context io;
  tcp::socket peer(io);
  bool completed = false;
  {
    auto s = std::make_unique<CoalescingStream>(io);
    connect_pair(io, s->socket(), peer);
    small_buffers(s->socket());
    small_buffers(peer);
    const auto block = pattern(CoalescingStream::kFullRecord, 11);
    // Full records complete at once while the peer reads nothing; the flush stays pending.
    for (int i = 0; i < 20; ++i) {
      s->async_write_some(asio::buffer(block),
                          [&](const asio::error_code&, std::size_t) { completed = true; });
      io.poll();
    }
    CHECK(s->unsent() > 0);
  }
  io.run();  // the aborted flush runs with the stream gone (ASan checks the rest)
  CHECK(completed);
}

TEST_CASE("TLS over the coalescing stream: 16 MiB both ways at once arrive byte-exact") {
  const auto ctx = node_contexts();
  asio::io_context io;
  TlsStream a(io, *ctx[0]), b(io, *ctx[1]);
  handshake_pair(io, a, b);
  // A frame-like mix: a short header, then a large payload as two buffers; repeated.
  const auto ab = pattern(16u << 20, 12), ba = pattern(16u << 20, 13);
  std::vector<std::uint8_t> at_b(ab.size()), at_a(ba.size());
  auto send = [](TlsStream& s, const std::vector<std::uint8_t>& d) {
    auto pos = std::make_shared<std::size_t>(0);
    auto step = std::make_shared<std::function<void()>>();
    *step = [&s, &d, pos, step] {
      if (*pos == d.size()) return;
      const std::size_t head = std::min<std::size_t>(40, d.size() - *pos);
      const std::size_t body = std::min<std::size_t>(3 * 1000 * 1000 + 4, d.size() - *pos - head);
      std::array<asio::const_buffer, 2> bufs{asio::buffer(d.data() + *pos, head),
                                             asio::buffer(d.data() + *pos + head, body)};
      asio::async_write(s, bufs,
                        [pos, step, n = head + body](const asio::error_code& ec, std::size_t got) {
                          REQUIRE_FALSE(ec);
                          REQUIRE(got == n);
                          *pos += n;
                          (*step)();
                        });
    };
    (*step)();
    return step;
  };
  auto keep1 = send(a, ab);
  auto keep2 = send(b, ba);
  std::size_t done = 0;
  asio::async_read(b, asio::buffer(at_b), [&](const asio::error_code& ec, std::size_t n) {
    REQUIRE_FALSE(ec);
    CHECK(n == ab.size());
    ++done;
  });
  asio::async_read(a, asio::buffer(at_a), [&](const asio::error_code& ec, std::size_t n) {
    REQUIRE_FALSE(ec);
    CHECK(n == ba.size());
    ++done;
  });
  io.restart();
  io.run();
  *keep1 = nullptr;
  *keep2 = nullptr;
  CHECK(done == 2);
  CHECK(at_b == ab);
  CHECK(at_a == ba);
  // Batching: far fewer socket reads and writes than the ~1030 TLS records each way (one each
  // without this layer; about 80 with it).
  CHECK(a.next_layer().socket_writes() < 300);
  CHECK(b.next_layer().socket_reads() < 300);
}

TEST_CASE(
    "coalescing stream: synchronous write_some takes whole buffers, in order with async writes") {
  asio::io_context io;
  CoalescingStream w(io);
  tcp::socket r(io);
  connect_pair(io, w.socket(), r);
  small_buffers(r);
  const auto data = pattern(3u << 20, 21);
  std::size_t pos = 0;
  std::mt19937 rng(22);
  // Before the io_context runs nothing can have been sent: the room shrinks by exactly what
  // each write_some took, and every write_some takes all it is given.
  std::size_t room = w.write_room();
  CHECK(room == CoalescingStream::kDefaultWriteBuffer);
  while (pos < 600 * 1024) {
    const std::size_t n = std::uniform_int_distribution<std::size_t>(1, 40 * 1024)(rng);
    asio::error_code ec;
    CHECK(w.write_some(asio::buffer(data.data() + pos, n), ec) == n);
    CHECK_FALSE(ec);
    pos += n;
    CHECK(w.write_room() == room - n);
    room -= n;
  }
  CHECK(w.unsent() == pos);
  // An async short write after them completes only once all of it is in the kernel; then more
  // synchronous writes, then the reader takes everything.
  bool short_done = false;
  const std::size_t short_at = pos;
  asio::async_write(w, asio::buffer(data.data() + pos, 100),
                    [&](const asio::error_code& ec, std::size_t n) {
                      CHECK_FALSE(ec);
                      CHECK(n == 100);
                      CHECK(w.unsent() == 0);
                      short_done = true;
                      std::size_t p2 = short_at + 100;
                      while (p2 < data.size()) {
                        const std::size_t k = std::min<std::size_t>(16406, data.size() - p2);
                        if (w.write_room() < k) break;
                        asio::error_code e;
                        CHECK(w.write_some(asio::buffer(data.data() + p2, k), e) == k);
                        p2 += k;
                      }
                      pos = p2;
                    });
  std::vector<std::uint8_t> got(data.size());
  std::size_t expect = 0;
  std::function<void()> read_more = [&] {
    r.async_read_some(asio::buffer(got.data() + expect, got.size() - expect),
                      [&](const asio::error_code& ec, std::size_t n) {
                        REQUIRE_FALSE(ec);
                        expect += n;
                        if (short_done && expect == pos) return;
                        read_more();
                      });
  };
  read_more();
  io.run();
  REQUIRE(short_done);
  CHECK(pos > short_at + 100 + 512 * 1024);  // the second round found room again
  REQUIRE(expect == pos);
  CHECK(std::memcmp(got.data(), data.data(), pos) == 0);
  // Once the link fails, write_some reports the sticky error and takes nothing.
  r.close();
  asio::error_code ec;
  for (int i = 0; i < 200 && !ec; ++i) {
    const std::size_t n = w.write_some(asio::buffer(data.data(), 64 * 1024), ec);
    if (ec) CHECK(n == 0);
    io.restart();
    io.run_for(std::chrono::milliseconds(5));
  }
  CHECK(ec);
}

TEST_CASE("coalescing stream: synchronous read_some never blocks") {
  asio::io_context io;
  tcp::socket w(io);
  CoalescingStream r(io, 64 * 1024);
  connect_pair(io, w, r.socket());
  std::vector<std::uint8_t> buf(300 * 1024);
  asio::error_code ec;
  CHECK(r.read_some(asio::buffer(buf), ec) == 0);
  CHECK(ec == asio::error::would_block);

  const auto data = pattern(200 * 1024, 31);
  asio::write(w, asio::buffer(data));
  std::vector<std::uint8_t> got;
  // Loopback delivers at once, but allow for a slow machine.
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (got.size() < data.size() && std::chrono::steady_clock::now() < until) {
    const std::size_t want = std::min<std::size_t>(1 + got.size() % 70000, buf.size());
    const std::size_t n = r.read_some(asio::buffer(buf.data(), want), ec);
    if (ec) {
      CHECK(ec == asio::error::would_block);
      CHECK(n == 0);
      continue;
    }
    CHECK(n <= want);
    got.insert(got.end(), buf.begin(), buf.begin() + static_cast<std::ptrdiff_t>(n));
  }
  CHECK(got == data);
  CHECK(r.read_some(asio::buffer(buf), ec) == 0);
  CHECK(ec == asio::error::would_block);

  // While an async_read_some is in flight it owns the read-ahead buffer: read_some stays out,
  // even when the socket has data, and the async read gets the bytes.
  bool async_done = false;
  std::size_t async_got = 0;
  r.async_read_some(asio::buffer(buf), [&](const asio::error_code& e, std::size_t n) {
    CHECK_FALSE(e);
    async_got = n;
    async_done = true;
  });
  asio::write(w, asio::buffer(data.data(), 1000));
  CHECK(r.read_some(asio::buffer(buf), ec) == 0);
  CHECK(ec == asio::error::would_block);
  io.run();
  REQUIRE(async_done);
  CHECK(async_got == 1000);
  CHECK(std::memcmp(buf.data(), data.data(), 1000) == 0);

  // The peer's close reads as EOF.
  w.shutdown(tcp::socket::shutdown_send);
  for (int i = 0; i < 500; ++i) {
    r.read_some(asio::buffer(buf), ec);
    if (ec != asio::error::would_block) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  CHECK(ec == asio::error::eof);
}

TEST_CASE(
    "TLS over the coalescing stream: synchronous write_some and read_some move whole records") {
  const auto ctx = node_contexts();
  asio::io_context io;
  TlsStream a(io, *ctx[0]), b(io, *ctx[1]);
  keep_record_buffers(a);
  keep_record_buffers(b);
  handshake_pair(io, a, b);
  CHECK((SSL_get_mode(a.native_handle()) & SSL_MODE_RELEASE_BUFFERS) == 0);

  // The transport's pattern: whole records while the layer below has room, then the rest.
  const auto data = pattern(6u << 20, 41);
  std::vector<std::uint8_t> got(data.size());
  std::size_t sent = 0, received = 0;
  int sync_records = 0, would_block = 0;
  asio::error_code ec;
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (received < data.size() && std::chrono::steady_clock::now() < until) {
    while (sent < data.size() && a.next_layer().write_room() >= CoalescingStream::kFullRecord) {
      const std::size_t k = std::min<std::size_t>(16384, data.size() - sent);
      const std::size_t n = a.write_some(asio::buffer(data.data() + sent, k), ec);
      REQUIRE_FALSE(ec);
      CHECK(n == k);  // one whole record per call
      sent += n;
      ++sync_records;
    }
    const std::size_t n =
        b.read_some(asio::buffer(got.data() + received, got.size() - received), ec);
    if (ec) {
      REQUIRE(ec == asio::error::would_block);
      ++would_block;
      io.restart();
      io.poll();  // lets the background writer of `a` send
    }
    CHECK(n <= 16384);  // at most one record per call
    received += n;
  }
  CHECK(got == data);
  CHECK(sync_records == 384);
  CHECK(would_block > 0);
}

TEST_CASE("coalescing stream: async_wait_sent completes only when the kernel has taken the bytes") {
  asio::io_context io;
  CoalescingStream a(io);
  tcp::socket b(io);
  connect_pair(io, a.socket(), b);
  small_buffers(a.socket());
  small_buffers(b);
  const auto data = pattern(4u << 20, 7);
  asio::error_code ec;
  for (std::size_t at = 0; at < data.size(); at += 64 * 1024) {
    a.write_some(asio::buffer(data.data() + at, 64 * 1024), ec);
    REQUIRE_FALSE(ec);
  }
  REQUIRE(a.accepted() == data.size());
  bool done = false;
  a.async_wait_sent(a.accepted(), [&](const asio::error_code& e) {
    CHECK_FALSE(e);
    CHECK(a.unsent() == 0);
    done = true;
  });
  // Nobody reads: 4 MiB cannot all be in 16 KiB socket buffers.
  io.run_for(std::chrono::milliseconds(200));
  CHECK_FALSE(done);
  CHECK(a.unsent() > 0);
  std::vector<std::uint8_t> got(data.size());
  asio::async_read(b, asio::buffer(got),
                   [](const asio::error_code& e, std::size_t) { CHECK_FALSE(e); });
  io.restart();
  io.run_for(std::chrono::seconds(30));
  CHECK(done);
  CHECK(got == data);
  // A target already reached completes at once (posted, not inside the call).
  bool again = false;
  a.async_wait_sent(a.accepted(), [&](const asio::error_code& e) {
    CHECK_FALSE(e);
    again = true;
  });
  CHECK_FALSE(again);
  io.restart();
  io.poll();
  CHECK(again);
}

TEST_CASE("coalescing stream: async_wait_readable waits for bytes, then read_some has them") {
  asio::io_context io;
  CoalescingStream a(io);
  tcp::socket b(io);
  connect_pair(io, a.socket(), b);
  asio::error_code ec;
  std::uint8_t buf[64];
  CHECK(a.read_some(asio::buffer(buf), ec) == 0);
  CHECK(ec == asio::error::would_block);
  int woken = 0;
  a.async_wait_readable([&](const asio::error_code& e) {
    CHECK_FALSE(e);
    ++woken;
  });
  io.run_for(std::chrono::milliseconds(100));
  CHECK(woken == 0);
  // While the wait owns the read-ahead buffer, read_some takes nothing.
  CHECK(a.read_some(asio::buffer(buf), ec) == 0);
  CHECK(ec == asio::error::would_block);
  const std::string msg = "twelve bytes";
  asio::write(b, asio::buffer(msg));
  io.restart();
  io.run_for(std::chrono::seconds(10));
  REQUIRE(woken == 1);
  const std::size_t n = a.read_some(asio::buffer(buf), ec);
  REQUIRE_FALSE(ec);
  CHECK(std::string(reinterpret_cast<char*>(buf), n) == msg);
  // The end of the stream completes a wait with eof.
  b.shutdown(tcp::socket::shutdown_send);
  asio::error_code end;
  a.async_wait_readable([&](const asio::error_code& e) { end = e; });
  io.restart();
  io.run_for(std::chrono::seconds(10));
  CHECK(end == asio::error::eof);
}

// Both ends after direct_records(): the transport's write pattern (write_record while there is
// room, then async_wait_sent) against asio::async_read over TlsRecordReader.
void send_records(TlsStream& s, const std::vector<std::uint8_t>& data, std::size_t done,
                  std::function<void(const asio::error_code&)> finished) {
  CoalescingStream& out = s.next_layer();
  asio::error_code ec;
  while (done < data.size() && out.write_room() >= CoalescingStream::kFullRecord) {
    const std::size_t k = std::min<std::size_t>(16384, data.size() - done);
    const std::size_t n = write_record(s, asio::buffer(data.data() + done, k), ec);
    if (ec) {
      finished(ec);
      return;
    }
    REQUIRE(n == k);
    done += n;
  }
  const bool last = done == data.size();
  const std::uint64_t target = last ? out.accepted() : out.room_target();
  out.async_wait_sent(target, [&s, &data, done, last, finished](const asio::error_code& e) {
    if (e || last) {
      finished(e);
      return;
    }
    send_records(s, data, done, finished);
  });
}

TEST_CASE("TLS direct records: 16 MiB both ways at once arrive byte-exact") {
  const auto ctx = node_contexts();
  asio::io_context io;
  TlsStream a(io, *ctx[0]), b(io, *ctx[1]);
  handshake_pair(io, a, b);
  REQUIRE(direct_records(a).is_ok());
  REQUIRE(direct_records(b).is_ok());
  TlsRecordReader ra(a), rb(b);
  const auto ab = pattern(16u << 20, 51), ba = pattern(16u << 20 | 12345, 52);
  std::vector<std::uint8_t> got_b(ab.size()), got_a(ba.size());
  int finished = 0;
  auto check = [&](const asio::error_code& e) {
    CHECK_FALSE(e);
    ++finished;
  };
  send_records(a, ab, 0, check);
  send_records(b, ba, 0, check);
  asio::async_read(rb, asio::buffer(got_b),
                   [&](const asio::error_code& e, std::size_t) { check(e); });
  asio::async_read(ra, asio::buffer(got_a),
                   [&](const asio::error_code& e, std::size_t) { check(e); });
  io.run_for(std::chrono::seconds(60));
  CHECK(finished == 4);
  CHECK(got_b == ab);
  CHECK(got_a == ba);
}

TEST_CASE("TLS direct records: bytes asio had already taken past the handshake are carried over") {
  const auto ctx = node_contexts();
  asio::io_context io;
  TlsStream a(io, *ctx[0]), b(io, *ctx[1]);
  handshake_pair(io, a, b);
  // `b` sends three records at once; `a` reads one byte of them through asio::ssl::stream, so
  // asio feeds its BIO pair with everything that has arrived and OpenSSL holds the rest of the
  // first record: the switch must lose neither.
  REQUIRE(direct_records(b).is_ok());
  const auto data = pattern(3 * 16384, 61);
  bool sent = false;
  send_records(b, data, 0, [&](const asio::error_code& e) {
    CHECK_FALSE(e);
    sent = true;
  });
  io.run_for(std::chrono::seconds(10));
  io.restart();
  REQUIRE(sent);
  std::uint8_t first = 0;
  std::size_t n = 0;
  asio::error_code ec;
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  do {
    n = a.read_some(asio::buffer(&first, 1), ec);
  } while (ec == asio::error::would_block && std::chrono::steady_clock::now() < until);
  REQUIRE_FALSE(ec);
  REQUIRE(n == 1);
  CHECK(first == data[0]);
  CHECK(a.next_layer().socket_reads() >= 1);
  REQUIRE(direct_records(a).is_ok());
  TlsRecordReader ra(a);
  std::vector<std::uint8_t> rest(data.size() - 1);
  bool done = false;
  asio::async_read(ra, asio::buffer(rest), [&](const asio::error_code& e, std::size_t) {
    CHECK_FALSE(e);
    done = true;
  });
  io.run_for(std::chrono::seconds(10));
  REQUIRE(done);
  CHECK(std::equal(rest.begin(), rest.end(), data.begin() + 1));
}

TEST_CASE("TLS direct records: close_notify reads as eof, a bare TCP close as stream_truncated") {
  const auto ctx = node_contexts();
  for (const bool notify : {true, false}) {
    CAPTURE(notify);
    asio::io_context io;
    TlsStream a(io, *ctx[0]), b(io, *ctx[1]);
    handshake_pair(io, a, b);
    REQUIRE(direct_records(a).is_ok());
    REQUIRE(direct_records(b).is_ok());
    const auto data = pattern(100000, 71);
    bool sent = false;
    send_records(b, data, 0, [&](const asio::error_code& e) {
      CHECK_FALSE(e);
      if (notify) SSL_shutdown(b.native_handle());  // close_notify, through the record BIO
      b.next_layer().async_wait_sent(b.next_layer().accepted(), [&](const asio::error_code& e2) {
        CHECK_FALSE(e2);
        tls_socket(b).shutdown(tcp::socket::shutdown_send);
        sent = true;
      });
    });
    TlsRecordReader ra(a);
    std::vector<std::uint8_t> got(data.size());
    asio::error_code first, end;
    asio::async_read(ra, asio::buffer(got), [&](const asio::error_code& e, std::size_t) {
      first = e;
      std::uint8_t more[16];
      ra.async_read_some(asio::buffer(more), [&](const asio::error_code& e2, std::size_t n) {
        CHECK(n == 0);
        end = e2;
      });
    });
    io.run_for(std::chrono::seconds(10));
    CHECK(sent);
    CHECK_FALSE(first);
    CHECK(got == data);
    CHECK(end == (notify ? asio::error_code(asio::error::eof)
                         : asio::error_code(asio::ssl::error::stream_truncated)));
  }
}

}  // namespace
}  // namespace gossip::net
