// TLS 1.3 over CoalescingStream (net/coalescing_stream.h) on real loopback sockets in one
// io_context: large buffers move both ways byte-exact through asio::ssl::stream, synchronous
// write_some and read_some move whole records, and after direct_records() (records straight
// between OpenSSL and the stream) nothing is lost at the switch and close_notify and a bare close
// are told apart. The stream on plain TCP: coalescing_stream_test.cc.
#include <doctest/doctest.h>

#include <array>
#include <asio.hpp>
#include <asio/ssl.hpp>
#include <functional>

#include "coalescing_test_util.h"
#include "net/coalescing_stream.h"
#include "net/tls.h"
#include "net_test_util.h"

namespace gossip::net {
namespace {

using asio::ip::tcp;
using testing::connect_pair;
using testing::pattern;

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

// Nodes 1 (`a`, the client) and 2 (`b`) connected over loopback by handshake_pair.
struct TlsPair {
  const std::array<std::shared_ptr<asio::ssl::context>, 2> ctx = node_contexts();
  asio::io_context io;
  TlsStream a{io, *ctx[0]}, b{io, *ctx[1]};
  TlsPair() { handshake_pair(io, a, b); }
};

TEST_CASE_FIXTURE(TlsPair,
                  "TLS over the coalescing stream: 16 MiB both ways at once arrive byte-exact") {
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

TEST_CASE_FIXTURE(TlsPair, "TLS direct records: 16 MiB both ways at once arrive byte-exact") {
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

TEST_CASE_FIXTURE(
    TlsPair,
    "TLS direct records: bytes asio had already taken past the handshake are carried over") {
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
