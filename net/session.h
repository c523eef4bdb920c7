// Session: one TCP (or TLS) connection of the transport to a neighbour — connect or accept, the
// TLS handshake and certificate identity, the Hello exchange, then a read loop that dispatches
// frames to Transport::Impl and a write queue of frames (Params payloads written straight from the
// caller's memory). Internal to the transport (net/transport_impl.h).
//
// Lifetime: shared_ptr held by Impl::sessions_ (and Peer) and by every pending handler; closed
// exactly once. Used on the io thread only.
#pragma once

// clang-format off: a standard header must come before Asio's (see net/tls.h).
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <vector>
// clang-format on
#include <asio.hpp>

#include "net/frame.h"
#include "net/tls.h"
#include "net/transport_impl.h"

namespace gossip::net {

using SslStream = TlsStream;

class Session : public std::enable_shared_from_this<Session> {
 public:
  enum class Phase { kConnecting, kTls, kHello, kEstablished, kClosed };

  Session(Transport::Impl& t, bool dialer, int expected_peer);

  tcp::socket& socket() { return tls_ ? tls_socket(*tls_) : *plain_; }
  int peer() const { return peer_; }
  bool established() const { return phase_ == Phase::kEstablished; }
  bool was_established() const { return was_established_; }
  bool paused() const { return paused_; }
  bool peer_said_goodbye() const { return peer_said_goodbye_; }
  std::string describe() const;
  void start_dial(const tcp::resolver::results_type& endpoints);
  void start_accepted() { on_connected({}); }

  void enqueue(OutFrame f);

  // Removes `op`'s frames that are not being written; true when one is being written.
  bool purge(const std::shared_ptr<SendOp>& op);

  // The send operations of `state` that still have frames queued here.
  std::vector<std::shared_ptr<SendOp>> ops_of(const std::shared_ptr<ExchangeState>& state) const;
  void goodbye(const std::string& reason);
  void resume();
  void on_tick(std::int64_t now);
  void close(const Status& why);

 private:
  // The stream that frames are read from: after the TLS handshake the session's records are
  // opened by TlsRecordReader (net/tls.h), asio::ssl::stream only made the handshake.
  template <typename F>
  void with_stream(F&& f) {
    if (tls_) {
      f(*tls_reader_);
    } else {
      f(*plain_);
    }
  }

  void reject(const Status& why);
  void bad_frame(const Status& why);
  void on_connected(const asio::error_code& ec);
  void on_tls(const asio::error_code& ec);

  Status check_acceptable(int id) const;
  void start_hello();
  void read_header();
  void on_read_error(const asio::error_code& ec);
  // After a read completed: false when the session is closed or the read failed (handed to
  // on_read_error); else notes the time of the arrival and returns true.
  bool read_arrived(const asio::error_code& ec);
  void on_header(const asio::error_code& ec);
  void on_message(const asio::error_code& ec);
  // Parses msg_ into `message`, a handshake message this end expects only when `expected`
  // (`unexpected` says why otherwise); rejects the session and returns false when it cannot.
  template <typename Message>
  bool read_handshake(bool expected, const char* unexpected, Message* message);
  void on_hello();
  void refuse(const Status& why);
  void on_hello_ack();
  void become_established(const pb::Hello& hello);
  void dispatch_params();

  // The payload is read in pieces of at most kPayloadPiece bytes and each piece is checksummed
  // (unless the sender omitted the checksum on this TLS link) right after it lands, while it is
  // still in cache: a second pass over a multi-MiB chunk from memory would cost about as much as
  // the copy out of the socket.
  static constexpr std::size_t kPayloadPiece = 512 * 1024;
  void read_payload_piece();
  void read_tls_piece(std::uint8_t* dst, std::size_t n, std::size_t got);
  void payload_piece_done(std::uint8_t* dst, std::size_t n);
  void discard();
  void on_payload(const asio::error_code& ec);
  void write_next();

  // TLS: encrypts the frame record by record straight into the CoalescingStream's write-behind
  // buffer (net::write_record: one SSL_write each, no trip through the io_context) while it has
  // room for a whole record; when it has none, waits until the kernel has taken enough
  // (CoalescingStream::room_target) and goes on. The frame is written when its last
  // record is in the kernel: whoever then half-closes after a Goodbye loses nothing. `done`
  // bytes of head + payload are written.
  static constexpr std::size_t kRecordPlaintext = 16384;  // TLS 1.3 maximum
  void write_tls_from(std::size_t done);
  void on_write(const asio::error_code& ec);

  Transport::Impl& t_;
  const bool dialer_;
  int peer_ = -1;       // the neighbour's id once known (dialer: from the start)
  int cert_peer_ = -1;  // the id the TLS certificate names
  std::string remote_;
  Phase phase_ = Phase::kConnecting;
  std::unique_ptr<SslStream> tls_;
  std::unique_ptr<TlsRecordReader> tls_reader_;  // after the handshake (direct_records)
  std::unique_ptr<tcp::socket> plain_;
  std::int64_t deadline_ms_ = 0;  // for the handshake
  std::int64_t last_rx_ms_ = 0;
  std::int64_t last_tx_ms_ = 0;

  FrameHeaderBytes hdr_{};
  FrameHeader header_;
  std::vector<std::uint8_t> msg_;
  pb::Params params_;
  std::shared_ptr<RecvSlot> target_;
  bool paused_ = false;
  bool peer_said_goodbye_ = false;  // the link ended with the peer's Goodbye
  bool was_established_ = false;    // reached kEstablished at some point
  std::uint64_t discard_left_ = 0;
  std::vector<std::uint8_t> scratch_;
  std::uint64_t payload_done_ = 0;  // bytes of the current payload read and checksummed
  std::uint32_t payload_crc_ = 0;

  std::deque<OutFrame> outq_;
  bool writing_ = false;
  bool close_after_flush_ = false;
  Status refused_;

 public:
  void set_remote(std::string r) { remote_ = std::move(r); }
};

}  // namespace gossip::net
