// CoalescingStream: the TCP stream under asio::ssl::stream on TLS links (net::TlsStream). After
// the handshake OpenSSL reads and writes it directly through a BIO (net::direct_records): records
// go in with write_some and out with read_some, and async_wait_sent / async_wait_readable are
// the waits; the asynchronous read and write operations below serve asio::ssl::stream during the
// handshake (and any user of the plain layering).
//
// asio::ssl::stream moves at most one TLS record (<= 17 KiB) per call to its next layer: every
// 16 KiB of payload costs one send(2), and every <= 17 KiB received one recv(2). On loopback the
// system calls, not AES-GCM, bound the rate. This layer batches both:
//
// - Writes: async_write_some copies the bytes into a buffer and hands them to a single background
//   asio::async_write, which sends everything buffered while it ran in one go; bulk records wait
//   to be sent until kBatch bytes are buffered or the writer pauses for one turn of the
//   io_context (so that batching happens even when the kernel takes every send). A write of a full
//   TLS record (>= kFullRecord bytes: bulk data) completes as soon as it is buffered, so the TLS
//   engine encrypts the next record while the previous ones are being sent, as long as no more
//   than `write_buffer` bytes wait. Any shorter write (a handshake message, a frame header, the
//   tail of a payload, a Goodbye) completes only when it, and so everything before it, has been
//   handed to the kernel: whoever then shuts the socket down (the transport half-closes after its
//   Goodbye) or closes it loses nothing that it was told was written. Order is preserved (one
//   byte queue, one background writer); the first write error is sticky and fails the waiting
//   write and every later one.
// - Reads: async_read_some is served from a read-ahead buffer that is refilled with one
//   async_read_some of up to `read_chunk` bytes from the socket.
//
// One read and one write may be outstanding at a time (the Asio stream contract, which
// asio::ssl::stream keeps). Single-threaded: all operations and handlers run on the executor of
// the socket's io_context (one thread in the transport). The buffers and the socket live in a
// shared state that the background operations keep alive, so the stream may be destroyed with a
// write still being flushed (the destructor closes the socket; the flush then fails quietly).
#pragma once

// clang-format off: a standard header must come first. asio/detail/config.hpp decides
// ASIO_HAS_STD_ALIGNED_ALLOC from <bits/c++config.h>; seen before it, this file's inline
// aligned_delete would free with operator delete what other files allocate with malloc.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <new>
#include <type_traits>
#include <utility>
#include <vector>
// clang-format on
#include <asio/buffer.hpp>
#include <asio/compose.hpp>
#include <asio/io_context.hpp>
#include <asio/ip/tcp.hpp>
#include <asio/post.hpp>
#include <asio/write.hpp>

namespace gossip::net {

// An allocator whose construct() default-initialises: vector<std::uint8_t, ...>::resize then
// leaves the new bytes as they are instead of zeroing them first (they are overwritten at once).
template <typename T>
struct DefaultInitAllocator : std::allocator<T> {
  template <typename U>
  struct rebind {
    using other = DefaultInitAllocator<U>;
  };
  using std::allocator<T>::allocator;
  template <typename U>
  void construct(U* p) noexcept(std::is_nothrow_default_constructible_v<U>) {
    ::new (static_cast<void*>(p)) U;
  }
  template <typename U, typename... Args>
  void construct(U* p, Args&&... args) {
    ::new (static_cast<void*>(p)) U(std::forward<Args>(args)...);
  }
};

class CoalescingStream {
 public:
  using socket_type = asio::ip::tcp::socket;
  using executor_type = socket_type::executor_type;
  using lowest_layer_type = socket_type::lowest_layer_type;

  // A TLS 1.3 record carrying the most plaintext a record may carry (2^14 bytes) with AES-GCM or
  // ChaCha20-Poly1305: 5 header + 16384 + 1 content type + 16 tag. Writes at least this long
  // complete once buffered; shorter ones once sent.
  static constexpr std::size_t kFullRecord = 16384 + 5 + 1 + 16;
  static constexpr std::size_t kDefaultReadChunk = 256 * 1024;
  static constexpr std::size_t kDefaultWriteBuffer = 1024 * 1024;
  // Bulk records are sent once this many are buffered, or when the writer pauses for one turn
  // of the io_context, whichever comes first.
  static constexpr std::size_t kBatch = 256 * 1024;

  explicit CoalescingStream(asio::io_context& io, std::size_t read_chunk = kDefaultReadChunk,
                            std::size_t write_buffer = kDefaultWriteBuffer)
      : st_(std::make_shared<State>(io, read_chunk, write_buffer)) {}
  CoalescingStream(CoalescingStream&&) noexcept = default;
  CoalescingStream& operator=(CoalescingStream&&) noexcept = default;
  CoalescingStream(const CoalescingStream&) = delete;
  CoalescingStream& operator=(const CoalescingStream&) = delete;
  ~CoalescingStream() {
    if (st_) {
      asio::error_code ignored;
      st_->sock.close(ignored);
    }
  }

  executor_type get_executor() { return st_->sock.get_executor(); }
  socket_type& socket() { return st_->sock; }
  lowest_layer_type& lowest_layer() { return st_->sock.lowest_layer(); }
  const lowest_layer_type& lowest_layer() const { return st_->sock.lowest_layer(); }

  // Bytes accepted by async_write_some and not yet handed to the kernel.
  std::size_t unsent() const { return static_cast<std::size_t>(st_->accepted - st_->sent); }
  // System calls made so far (for tests and benchmarks).
  std::uint64_t socket_writes() const { return st_->socket_writes; }
  std::uint64_t socket_reads() const { return st_->socket_reads; }

  // Bytes async_write_some / write_some may still take before bulk writes have to wait.
  std::size_t write_room() const {
    const std::size_t u = unsent();
    return u < st_->cap ? st_->cap - u : 0;
  }

  // Synchronous, non-blocking counterparts, for asio::ssl::stream's read_some / write_some: with
  // them the transport decrypts (encrypts) every TLS record that can be processed now in one go,
  // instead of one trip through the io_context per record (docs/net.md, "TLS throughput").
  //
  // read_some: from the read-ahead buffer, else one non-blocking recv(2) into it; would_block
  // when the socket has nothing (and while an async_read_some is in flight). Never blocks.
  template <typename MutableBufferSequence>
  std::size_t read_some(const MutableBufferSequence& buffers, asio::error_code& ec) {
    State& s = *st_;
    ec = {};
    if (asio::buffer_size(buffers) == 0) return 0;
    if (s.async_reading) {  // it owns the read-ahead buffer until it completes
      ec = asio::error::would_block;
      return 0;
    }
    if (s.rpos == s.rend) {
      if (!s.sock.non_blocking()) {
        s.sock.non_blocking(true, ec);
        if (ec) return 0;
      }
      s.socket_reads++;
      const std::size_t n = s.sock.read_some(asio::buffer(s.rbuf), ec);
      if (ec) return 0;
      s.rpos = 0;
      s.rend = n;
    }
    const std::size_t copied =
        asio::buffer_copy(buffers, asio::buffer(s.rbuf.data() + s.rpos, s.rend - s.rpos));
    s.rpos += copied;
    return copied;
  }

  // write_some: takes the whole buffer (never blocks, never takes part of it) and hands it to the
  // background writer like a bulk async_write_some; the caller keeps the backlog bounded by
  // checking write_room() first. Fails only with the sticky write error.
  template <typename ConstBufferSequence>
  std::size_t write_some(const ConstBufferSequence& buffers, asio::error_code& ec) {
    State& s = *st_;
    ec = s.write_error;
    const std::size_t size = asio::buffer_size(buffers);
    if (ec || size == 0) return 0;
    append(s, buffers, size);
    if (!s.flushing) {
      if (s.pending.size() >= kBatch) {
        start_flush(st_);
      } else {
        post_flush(st_);
      }
    }
    return size;
  }

  // Bytes accepted so far (async_write_some, write_some).
  std::uint64_t accepted() const { return st_->accepted; }
  // The value of sent bytes at which write_room() is back to a whole TLS record: the target for
  // async_wait_sent when a writer of records has run out of room.
  std::uint64_t room_target() const {
    const std::uint64_t keep = st_->cap - kFullRecord;
    return st_->accepted > keep ? st_->accepted - keep : 0;
  }
  // The first error of a background write (sticky; fails every later write), or none.
  asio::error_code write_error() const { return st_->write_error; }

  // Completes once the kernel has taken the first `target` accepted bytes (target <= accepted()),
  // or with the sticky write error. Starts sending whatever is buffered at once. For callers that
  // append with write_some and need to know when their bytes are out (net::write_record's
  // users: a frame is written when its last record is in the kernel, and a bulk writer waits
  // for the backlog to fall to room_target()). One wait (or waiting write) at a
  // time, as for writes.
  template <typename WaitToken>
  auto async_wait_sent(std::uint64_t target, WaitToken&& token) {
    return asio::async_compose<WaitToken, void(asio::error_code)>(WaitOp{st_, target}, token,
                                                                  st_->sock);
  }

  // Completes once received bytes wait in the read-ahead buffer (at once if some already do),
  // with the socket's error (eof included) otherwise; read_some then has them. For readers that
  // take bytes with read_some only (net::read_record's BIO). While it is in flight read_some says
  // would_block. One read or wait at a time.
  template <typename WaitToken>
  auto async_wait_readable(WaitToken&& token) {
    return asio::async_compose<WaitToken, void(asio::error_code)>(ReadableOp{st_}, token,
                                                                  st_->sock);
  }

  template <typename MutableBufferSequence, typename ReadToken>
  auto async_read_some(const MutableBufferSequence& buffers, ReadToken&& token) {
    return asio::async_compose<ReadToken, void(asio::error_code, std::size_t)>(
        ReadOp<MutableBufferSequence>{st_, buffers}, token, st_->sock);
  }

  template <typename ConstBufferSequence, typename WriteToken>
  auto async_write_some(const ConstBufferSequence& buffers, WriteToken&& token) {
    return asio::async_compose<WriteToken, void(asio::error_code, std::size_t)>(
        WriteOp<ConstBufferSequence>{st_, buffers}, token, st_->sock);
  }

 private:
  // The one write waiting for the background writer: runs when `sent` reaches `target` or the
  // writer fails.
  struct Waiter {
    std::uint64_t target = 0;
    virtual ~Waiter() = default;
    virtual void fire(const asio::error_code& ec) = 0;
  };
  // One background async_write. The waiting write belongs to it, not to the State: the waiter's
  // handler may own the stream that owns the State, and if the io_context is torn down with the
  // write pending, destroying the operation must free that chain (a State-owned waiter would be
  // a reference cycle, i.e. a leak).
  struct Flight {
    std::unique_ptr<Waiter> waiter;
  };

  struct State {
    State(asio::io_context& io, std::size_t read_chunk, std::size_t write_buffer)
        : sock(io), rbuf(read_chunk), cap(write_buffer) {
      pending.reserve(write_buffer + kFullRecord);
      flight.reserve(write_buffer + kFullRecord);
    }
    socket_type sock;
    // Read-ahead: rbuf[rpos, rend) is received and not yet read.
    std::vector<std::uint8_t> rbuf;
    std::size_t rpos = 0, rend = 0;
    bool async_reading = false;  // an async_read_some is in flight
    // Write-behind: `flight` is being sent by the background writer, `pending` waits for it.
    std::size_t cap;
    std::vector<std::uint8_t, DefaultInitAllocator<std::uint8_t>> pending, flight;
    bool flushing = false;
    bool flush_posted = false;
    std::uint64_t accepted_at_post = 0;
    std::uint64_t accepted = 0;     // bytes taken by async_write_some
    std::uint64_t sent = 0;         // bytes the kernel took
    asio::error_code write_error;   // sticky
    std::weak_ptr<Flight> current;  // the background write in progress, while flushing
    std::uint64_t socket_writes = 0, socket_reads = 0;
  };

  template <typename Buffers>
  static void append(State& s, const Buffers& buffers, std::size_t size) {
    const std::size_t at = s.pending.size();
    s.pending.resize(at + size);
    asio::buffer_copy(asio::buffer(s.pending.data() + at, size), buffers);
    s.accepted += size;
  }

  static void start_flush(const std::shared_ptr<State>& st,
                          std::unique_ptr<Waiter> waiter = nullptr) {
    st->flight.swap(st->pending);
    st->flushing = true;
    st->socket_writes++;  // counts the flushes; async_write may need more than one send(2)
    auto f = std::make_shared<Flight>();
    f->waiter = std::move(waiter);
    st->current = f;
    asio::async_write(st->sock, asio::buffer(st->flight),
                      [st, f](const asio::error_code& ec, std::size_t n) {
                        st->flushing = false;
                        st->sent += n;
                        st->flight.clear();
                        std::unique_ptr<Waiter> w = std::move(f->waiter);
                        if (ec) {
                          if (!st->write_error) st->write_error = ec;
                          st->pending.clear();
                        }
                        const bool fire = w && (st->write_error || st->sent >= w->target);
                        if (!st->write_error && !st->pending.empty()) {
                          if (w && !fire) {
                            start_flush(st, std::move(w));  // still waiting: goes along
                          } else if (st->pending.size() >= kBatch) {
                            start_flush(st);
                          } else {
                            post_flush(st);
                          }
                        }
                        if (fire) w->fire(st->write_error);
                      });
  }

  // Sends the buffered bulk records once the writer adds none for a turn of the io_context or a
  // batch is full. (Each TLS record takes one turn: asio::ssl::stream posts between records.)
  static void post_flush(const std::shared_ptr<State>& st) {
    if (st->flush_posted) return;
    st->flush_posted = true;
    st->accepted_at_post = st->accepted;
    asio::post(st->sock.get_executor(), [st] {
      st->flush_posted = false;
      if (st->flushing || st->pending.empty() || st->write_error) return;
      if (st->accepted == st->accepted_at_post || st->pending.size() >= kBatch) {
        start_flush(st);
      } else {
        post_flush(st);
      }
    });
  }

  // One async_read_some from the socket into the (empty) read-ahead buffer for `self`; read_some
  // says would_block until filled() records what came.
  template <typename Self>
  static void fill(State& s, Self&& self) {
    s.async_reading = true;
    s.socket_reads++;
    s.sock.async_read_some(asio::buffer(s.rbuf), std::forward<Self>(self));
  }
  static void filled(State& s, std::size_t n) {
    s.async_reading = false;
    s.rpos = 0;
    s.rend = n;
  }

  template <typename Buffers>
  struct ReadOp {
    std::shared_ptr<State> st;
    Buffers buffers;
    bool started = false;

    template <typename Self>
    void operator()(Self& self, asio::error_code ec = {}, std::size_t n = 0) {
      State& s = *st;
      if (!started) {
        started = true;
        if (s.rpos == s.rend && asio::buffer_size(buffers) != 0) {
          fill(s, std::move(self));
          return;
        }
        s.async_reading = true;  // until the posted completion has copied
        // Data already buffered (or nothing asked): complete, but never inside the initiation.
        asio::post(s.sock.get_executor(), std::move(self));
        return;
      }
      s.async_reading = false;
      if (s.rpos == s.rend) {  // back from the socket
        filled(s, n);
        if (n == 0) {
          self.complete(ec, 0);
          return;
        }
      }
      const std::size_t copied =
          asio::buffer_copy(buffers, asio::buffer(s.rbuf.data() + s.rpos, s.rend - s.rpos));
      s.rpos += copied;
      self.complete(asio::error_code(), copied);
    }
  };

  template <typename Self>
  struct WaiterFor final : Waiter {
    explicit WaiterFor(Self&& s) : self(std::move(s)) {}
    Self self;
    void fire(const asio::error_code& ec) override { self(ec, 0); }
  };

  // Parks the operation `self` (which owns `s` through its state pointer) until the writer has
  // sent `target` bytes or failed: the writer fires it then.
  template <typename Self>
  static void wait_for_sent(State& s, Self self, std::uint64_t target) {
    auto w = std::make_unique<WaiterFor<Self>>(std::move(self));
    w->target = target;
    s.current.lock()->waiter = std::move(w);  // `self` took its state pointer along
  }

  template <typename Buffers>
  struct WriteOp {
    std::shared_ptr<State> st;
    Buffers buffers;
    std::size_t size = 0;
    int phase = 0;  // 0: initiation, 1: complete now, 2: woken by the writer

    template <typename Self>
    void operator()(Self& self, asio::error_code ec = {}, std::size_t = 0) {
      State& s = *st;
      if (phase == 0) {
        size = asio::buffer_size(buffers);
        phase = 1;
        if (!s.write_error && size != 0) {
          append(s, buffers, size);
          // Bulk records may run up to `cap` bytes ahead of the kernel; anything else waits
          // until it has been sent.
          const std::uint64_t target =
              size >= kFullRecord ? (s.accepted > s.cap ? s.accepted - s.cap : 0) : s.accepted;
          const bool wait = s.sent < target;
          if (!s.flushing) {
            if (wait || s.pending.size() >= kBatch) {
              start_flush(st);
            } else {
              post_flush(st);
            }
          }
          if (wait) {  // a flush is in progress now: the waiter goes with it
            phase = 2;
            wait_for_sent(s, std::move(self), target);
            return;
          }
        }
        asio::post(s.sock.get_executor(), std::move(self));
        return;
      }
      ec = s.write_error;  // phase 1 or 2: the sticky error, if any, wins
      if (ec) {
        self.complete(ec, 0);
      } else {
        self.complete(ec, size);
      }
    }
  };

  struct ReadableOp {
    std::shared_ptr<State> st;
    bool started = false;

    template <typename Self>
    void operator()(Self& self, asio::error_code ec = {}, std::size_t n = 0) {
      State& s = *st;
      if (!started) {
        started = true;
        if (s.rpos == s.rend) {
          fill(s, std::move(self));
          return;
        }
        asio::post(s.sock.get_executor(), std::move(self));
        return;
      }
      if (s.async_reading) {  // back from the socket
        filled(s, n);
        if (n == 0 && !ec) ec = asio::error::eof;
        if (n != 0) ec = {};
      }
      self.complete(ec);
    }
  };

  struct WaitOp {
    std::shared_ptr<State> st;
    std::uint64_t target = 0;
    bool started = false;

    template <typename Self>
    void operator()(Self& self, asio::error_code = {}, std::size_t = 0) {
      State& s = *st;
      if (!started) {
        started = true;
        if (!s.write_error && s.sent < target) {
          if (!s.flushing) start_flush(st);
          wait_for_sent(s, std::move(self), target);
          return;
        }
        asio::post(s.sock.get_executor(), std::move(self));
        return;
      }
      self.complete(s.write_error);
    }
  };

  std::shared_ptr<State> st_;
};

}  // namespace gossip::net
