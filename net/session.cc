// Session (see session.h): the connection state machine. A dialer connects, makes the TLS
// handshake as client and sends Hello; an acceptor checks the certificate's node id against its
// neighbours and answers with HelloAck. Once established, frames are read header, message, payload;
// Params payloads go where Transport::Impl::classify says (net/recv_slots.cc), read in pieces and
// checksummed while in cache.
#include "net/session.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/ssl.h>

#include <algorithm>
#include <array>

#include "common/log.h"
#include "net/checksum.h"

namespace gossip::net {

Session::Session(Transport::Impl& t, bool dialer, int expected_peer)
    : t_(t), dialer_(dialer), peer_(expected_peer) {
  if (t_.ssl() != nullptr) {
    tls_ = std::make_unique<SslStream>(t_.io(), *t_.ssl());
    keep_record_buffers(*tls_);
  } else {
    plain_ = std::make_unique<tcp::socket>(t_.io());
  }
  deadline_ms_ = now_ms() + t_.options().handshake_timeout_ms;
}

std::string Session::describe() const {
  return peer_ >= 0 ? node_name(peer_) + " (" + remote_ + ")" : remote_;
}

void Session::start_dial(const tcp::resolver::results_type& endpoints) {
  phase_ = Phase::kConnecting;
  asio::async_connect(
      socket(), endpoints,
      [self = shared_from_this()](const asio::error_code& ec, const tcp::endpoint&) {
        self->on_connected(ec);
      });
}

void Session::enqueue(OutFrame f) {
  if (phase_ == Phase::kClosed) {
    if (f.op) f.op->finish(unavailable("link closed"));
    return;
  }
  outq_.push_back(std::move(f));
  if (!writing_) write_next();
}

bool Session::purge(const std::shared_ptr<SendOp>& op) {
  const std::size_t keep = writing_ ? 1 : 0;
  std::deque<OutFrame> rest;
  for (std::size_t i = 0; i < outq_.size(); ++i) {
    if (i < keep || outq_[i].op != op) rest.push_back(std::move(outq_[i]));
  }
  outq_.swap(rest);
  return op->writing > 0;
}

std::vector<std::shared_ptr<SendOp>> Session::ops_of(
    const std::shared_ptr<ExchangeState>& state) const {
  std::vector<std::shared_ptr<SendOp>> ops;
  for (const OutFrame& f : outq_) {
    if (f.op && f.op->ex == state && !f.op->resolved &&
        std::find(ops.begin(), ops.end(), f.op) == ops.end()) {
      ops.push_back(f.op);
    }
  }
  return ops;
}

void Session::goodbye(const std::string& reason) {
  if (phase_ != Phase::kEstablished) {
    close(unavailable("shutting down"));
    return;
  }
  pb::Goodbye g;
  g.set_reason(reason);
  enqueue({std::make_shared<const std::string>(encode_frame(FrameType::kGoodbye, g)), {}, {}});
  close_after_flush_ = true;
}

void Session::resume() {
  if (!paused_ || phase_ != Phase::kEstablished) return;
  paused_ = false;
  last_rx_ms_ = now_ms();
  dispatch_params();
}

void Session::on_tick(std::int64_t now) {
  if (phase_ == Phase::kClosed) return;
  if (phase_ != Phase::kEstablished) {
    if (now > deadline_ms_) {
      reject(deadline_exceeded("handshake did not finish within " +
                               std::to_string(t_.options().handshake_timeout_ms) + " ms"));
    }
    return;
  }
  if (!paused_ && now - last_rx_ms_ > t_.options().peer_timeout_ms) {
    t_.count(&TransportStats::links_timed_out);
    GOSSIP_LOG(kWarning) << "net: " << describe() << " silent for " << (now - last_rx_ms_)
                         << " ms; dropping the link";
    close(deadline_exceeded(describe() + " sent nothing for " + std::to_string(now - last_rx_ms_) +
                            " ms"));
    return;
  }
  if (outq_.empty() && !close_after_flush_ &&
      now - last_tx_ms_ >= t_.options().heartbeat_interval_ms) {
    pb::Heartbeat hb;
    hb.set_sender(static_cast<std::uint32_t>(t_.options().self.node_id));
    hb.set_iteration(t_.local_iteration());
    enqueue({std::make_shared<const std::string>(encode_frame(FrameType::kHeartbeat, hb)), {}, {}});
  }
}

void Session::close(const Status& why) {
  if (phase_ == Phase::kClosed) return;
  const bool was_established = phase_ == Phase::kEstablished;
  phase_ = Phase::kClosed;
  asio::error_code ignored;
  socket().shutdown(tcp::socket::shutdown_both, ignored);
  socket().close(ignored);
  // Every queued send fails now. Once the socket is closed on this (the io) thread no syscall
  // touches the caller's buffers again, so the frame in flight fails too; its handler only pops
  // it from the queue.
  const std::size_t keep = writing_ ? 1 : 0;
  const Status lost = unavailable("link to " + describe() + " closed: " + why.message());
  if (keep == 1 && outq_.front().op) outq_.front().op->finish(lost);
  while (outq_.size() > keep) {
    OutFrame f = std::move(outq_.back());
    outq_.pop_back();
    if (f.op) f.op->finish(lost);
  }
  if (was_established) {
    GOSSIP_LOG(kInfo) << "net: link to " << describe() << " closed: " << why.message();
  }
  t_.on_session_closed(shared_from_this(), why);
}

void Session::reject(const Status& why) {
  if (phase_ == Phase::kClosed) return;
  t_.count(&TransportStats::handshakes_rejected);
  // check_peer_hello: InvalidArgument is a configuration mismatch (job, algorithm, topology,
  // model), which no retry can fix.
  if (why.code() == StatusCode::kInvalidArgument) t_.note_config_mismatch(why);
  GOSSIP_LOG(kWarning) << "net: node " << t_.options().self.node_id << " rejected "
                       << (dialer_ ? "link to " : "connection from ") << describe() << ": "
                       << why.to_string();
  close(why);
}

void Session::bad_frame(const Status& why) {
  if (phase_ == Phase::kClosed) return;
  t_.count(&TransportStats::bad_frames);
  GOSSIP_LOG(kWarning) << "net: bad frame from " << describe() << ": " << why.to_string()
                       << "; closing the link";
  close(why);
}

void Session::on_connected(const asio::error_code& ec) {
  if (phase_ == Phase::kClosed) return;
  if (ec) {
    close(unavailable("cannot connect to " + describe() + ": " + ec.message()));
    return;
  }
  deadline_ms_ = now_ms() + t_.options().handshake_timeout_ms;
  asio::error_code ignored;
  socket().set_option(tcp::no_delay(true), ignored);
  if (const int lowat = static_cast<int>(t_.options().notsent_lowat_bytes); lowat > 0) {
    ::setsockopt(socket().native_handle(), IPPROTO_TCP, TCP_NOTSENT_LOWAT, &lowat, sizeof lowat);
  }
  if (const std::string& cc = t_.options().congestion_control; !cc.empty()) {
    // start() checked that this process may use it; a failure here is logged, not fatal.
    if (Status s = set_congestion_control(socket().native_handle(), cc); !s.is_ok()) {
      GOSSIP_LOG(kWarning) << "net: " << describe() << ": " << s.to_string();
    }
  }
  const auto ep = socket().remote_endpoint(ignored);
  if (remote_.empty() || !dialer_)
    remote_ = ep.address().to_string() + ":" + std::to_string(ep.port());
  if (tls_) {
    phase_ = Phase::kTls;
    tls_->async_handshake(
        dialer_ ? asio::ssl::stream_base::client : asio::ssl::stream_base::server,
        [self = shared_from_this()](const asio::error_code& e) { self->on_tls(e); });
    return;
  }
  start_hello();
}

void Session::on_tls(const asio::error_code& ec) {
  if (phase_ == Phase::kClosed) return;
  if (ec) {
    reject(permission_denied("TLS handshake failed: " + ec.message()));
    return;
  }
  if (Status s = direct_records(*tls_); !s.is_ok()) {
    close(s);
    return;
  }
  tls_reader_ = std::make_unique<TlsRecordReader>(*tls_);
  Result<CertIdentity> id = cert_identity(SSL_get0_peer_certificate(tls_->native_handle()));
  if (!id.is_ok()) {
    reject(id.status());
    return;
  }
  if (id->job_id != t_.options().self.job_id) {
    reject(permission_denied("certificate is for job '" + id->job_id.substr(0, 64) +
                             "', ours is '" + t_.options().self.job_id + "'"));
    return;
  }
  if (dialer_) {
    if (id->node_id != peer_) {
      reject(permission_denied("certificate names node " + std::to_string(id->node_id) +
                               ", expected neighbour " + std::to_string(peer_)));
      return;
    }
  } else {
    Status s = check_acceptable(id->node_id);
    if (!s.is_ok()) {
      reject(s);
      return;
    }
    peer_ = id->node_id;
  }
  cert_peer_ = id->node_id;
  start_hello();
}

// The acceptor side's rule: a neighbour with a lower id than ours (it dials us).
Status Session::check_acceptable(int id) const {
  if (!t_.is_neighbour(id)) {
    return permission_denied(node_name(id) + " is not a neighbour of node " +
                             std::to_string(t_.options().self.node_id));
  }
  if (id > t_.options().self.node_id) {
    return permission_denied(node_name(id) + " dialed us, but the lower id dials");
  }
  return Status::ok();
}

void Session::start_hello() {
  phase_ = Phase::kHello;
  if (dialer_) {
    enqueue({std::make_shared<const std::string>(encode_frame(FrameType::kHello, t_.local_hello())),
             {},
             {}});
  }
  read_header();
}

void Session::read_header() {
  with_stream([this](auto& s) {
    asio::async_read(s, asio::buffer(hdr_),
                     [self = shared_from_this()](const asio::error_code& ec, std::size_t) {
                       self->on_header(ec);
                     });
  });
}

void Session::on_read_error(const asio::error_code& ec) {
  if (phase_ != Phase::kEstablished) {
    reject(unavailable("connection closed during the handshake: " + ec.message()));
  } else if (ec == asio::error::eof || ec == asio::ssl::error::stream_truncated) {
    close(unavailable(describe() + " closed the connection"));
  } else {
    close(unavailable("reading from " + describe() + ": " + ec.message()));
  }
}

bool Session::read_arrived(const asio::error_code& ec) {
  if (phase_ == Phase::kClosed) return false;
  if (ec) {
    on_read_error(ec);
    return false;
  }
  last_rx_ms_ = now_ms();
  return true;
}

void Session::on_header(const asio::error_code& ec) {
  if (!read_arrived(ec)) return;
  const FrameLimits limits =
      phase_ == Phase::kEstablished ? session_limits(t_.model_bytes()) : handshake_limits();
  Result<FrameHeader> h = decode_frame_header(hdr_, limits);
  if (!h.is_ok()) {
    if (phase_ == Phase::kEstablished) {
      bad_frame(h.status());
    } else {
      reject(h.status());
    }
    return;
  }
  header_ = *h;
  msg_.resize(header_.header_len);
  if (msg_.empty()) {
    on_message({});
    return;
  }
  with_stream([this](auto& s) {
    asio::async_read(s, asio::buffer(msg_),
                     [self = shared_from_this()](const asio::error_code& e, std::size_t) {
                       self->on_message(e);
                     });
  });
}

void Session::on_message(const asio::error_code& ec) {
  if (!read_arrived(ec)) return;
  switch (header_.type) {
    case FrameType::kHello:
      on_hello();
      return;
    case FrameType::kHelloAck:
      on_hello_ack();
      return;
    case FrameType::kParams: {
      params_.Clear();
      Status s = parse_message(msg_, &params_);
      if (s.is_ok()) s = validate_params(params_, header_.payload_len, t_.model_bytes());
      if (s.is_ok() && params_.sender() != static_cast<std::uint32_t>(peer_)) {
        s = corruption("Params from node " + std::to_string(params_.sender()) + " on the link to " +
                       node_name(peer_));
      }
      if (!s.is_ok()) {
        bad_frame(s);
        return;
      }
      if (params_.chunk_index() == 0) t_.note_peer_iteration(peer_, params_.iteration());
      dispatch_params();
      return;
    }
    case FrameType::kHeartbeat: {
      pb::Heartbeat hb;
      Status s = parse_message(msg_, &hb);
      if (s.is_ok() && hb.sender() != static_cast<std::uint32_t>(peer_)) {
        s = corruption("Heartbeat from node " + std::to_string(hb.sender()) + " on the link to " +
                       node_name(peer_));
      }
      if (!s.is_ok()) {
        bad_frame(s);
        return;
      }
      s = t_.on_heartbeat(peer_, hb);
      if (!s.is_ok()) {
        bad_frame(s);
        return;
      }
      if (phase_ == Phase::kEstablished) read_header();
      return;
    }
    case FrameType::kGoodbye: {
      pb::Goodbye g;
      Status s = parse_message(msg_, &g);
      peer_said_goodbye_ = true;
      close(unavailable(describe() + " said goodbye" +
                        (s.is_ok() ? ": " + g.reason().substr(0, 200) : std::string())));
      return;
    }
  }
}

template <typename Message>
bool Session::read_handshake(bool expected, const char* unexpected, Message* message) {
  const Status s = expected ? parse_message(msg_, message) : corruption(unexpected);
  if (!s.is_ok()) reject(s);
  return s.is_ok();
}

void Session::on_hello() {
  pb::Hello hello;
  if (!read_handshake(!dialer_, "unexpected Hello from the node we dialed", &hello)) return;
  int expected = cert_peer_;
  Status s;
  if (!tls_) {  // --insecure: the Hello is the only identity there is
    expected = static_cast<int>(std::min<std::uint32_t>(hello.node_id(), 1u << 30));
    s = check_acceptable(expected);
    if (!s.is_ok()) {
      refuse(s);
      return;
    }
    peer_ = expected;
  }
  s = check_peer_hello(hello, t_.options().self, expected);
  if (!s.is_ok()) {
    refuse(s);
    return;
  }
  pb::HelloAck ack;
  *ack.mutable_hello() = t_.local_hello();
  ack.set_accepted(true);
  enqueue({std::make_shared<const std::string>(encode_frame(FrameType::kHelloAck, ack)), {}, {}});
  become_established(hello);
}

// Tells the dialer why (so both logs say which field differed), then closes.
void Session::refuse(const Status& why) {
  t_.count(&TransportStats::handshakes_rejected);
  // check_peer_hello: InvalidArgument is a configuration mismatch (job, algorithm, topology,
  // model), which no retry can fix. Recorded with the peer's name, as the dialer's side is.
  if (why.code() == StatusCode::kInvalidArgument) {
    t_.note_config_mismatch(invalid_argument(describe() + ": " + why.message()));
  }
  GOSSIP_LOG(kWarning) << "net: node " << t_.options().self.node_id << " rejected connection from "
                       << describe() << ": " << why.to_string();
  pb::HelloAck ack;
  *ack.mutable_hello() = t_.local_hello();
  ack.set_accepted(false);
  ack.set_reason(why.message());
  enqueue({std::make_shared<const std::string>(encode_frame(FrameType::kHelloAck, ack)), {}, {}});
  close_after_flush_ = true;
  refused_ = why;
}

void Session::on_hello_ack() {
  pb::HelloAck ack;
  if (!read_handshake(dialer_, "unexpected HelloAck from a node that dialed us", &ack)) return;
  if (!ack.accepted()) {
    // When its own Hello (sent with the refusal) shows a configuration mismatch, that is the
    // reason, seen from our side: recorded like one we refused (config_mismatch()).
    Status mismatch = check_peer_hello(ack.hello(), t_.options().self, peer_);
    reject(
        mismatch.code() == StatusCode::kInvalidArgument
            ? invalid_argument(describe() + " refused our Hello: " + mismatch.message())
            : permission_denied(describe() + " refused our Hello: " + ack.reason().substr(0, 300)));
    return;
  }
  const Status s = check_peer_hello(ack.hello(), t_.options().self, peer_);
  if (!s.is_ok()) {
    reject(s);
    return;
  }
  become_established(ack.hello());
}

void Session::become_established(const pb::Hello& hello) {
  phase_ = Phase::kEstablished;
  was_established_ = true;
  last_rx_ms_ = now_ms();
  t_.on_established(shared_from_this(), peer_, hello);
  if (phase_ == Phase::kEstablished) read_header();
}

void Session::dispatch_params() {
  if (Status s = check_params_checksum_mode(params_, tls_ != nullptr); !s.is_ok()) {
    bad_frame(s);
    return;
  }
  Peer& p = t_.peer(peer_);
  Transport::Impl::Target target = t_.classify(p, params_);
  switch (target.kind) {
    case Transport::Impl::Target::kBad:
      bad_frame(target.status);
      return;
    case Transport::Impl::Target::kPause:
      paused_ = true;
      return;
    case Transport::Impl::Target::kDiscard:
      t_.count(&TransportStats::stale_frames);
      discard_left_ = header_.payload_len;
      discard();
      return;
    case Transport::Impl::Target::kInto:
      break;
  }
  target_ = std::move(target.slot);
  target_->reading = true;
  if (target_->ex) target_->ex->busy(+1);
  payload_done_ = 0;
  payload_crc_ = 0;
  read_payload_piece();
}

void Session::read_payload_piece() {
  auto* dst = reinterpret_cast<std::uint8_t*>(target_->buffer.data()) + params_.byte_offset() +
              payload_done_;
  const std::size_t n = std::min<std::uint64_t>(header_.payload_len - payload_done_, kPayloadPiece);
  if (tls_) {
    read_tls_piece(dst, n, 0);
    return;
  }
  with_stream([&](auto& s) {
    asio::async_read(s, asio::buffer(dst, n), TransferRest{n},
                     [self = shared_from_this(), dst, n](const asio::error_code& ec, std::size_t) {
                       if (ec) {
                         self->on_payload(ec);
                       } else {
                         self->payload_piece_done(dst, n);
                       }
                     });
  });
}

// TLS: decrypts every record already received with synchronous, non-blocking read_some calls
// (one SSL_read each, no trip through the io_context), and waits for more with one
// async_read_some when there is none. `got` bytes of the piece [dst, dst + n) are in.
void Session::read_tls_piece(std::uint8_t* dst, std::size_t n, std::size_t got) {
  asio::error_code ec;
  while (got < n) {
    got += tls_reader_->read_some(asio::buffer(dst + got, n - got), ec);
    if (ec) break;
  }
  if (got == n) {
    payload_piece_done(dst, n);
    return;
  }
  if (ec != asio::error::would_block) {
    on_payload(ec);
    return;
  }
  tls_reader_->async_read_some(
      asio::buffer(dst + got, n - got),
      [self = shared_from_this(), dst, n, got](const asio::error_code& e, std::size_t k) {
        if (e || self->phase_ == Phase::kClosed || self->target_->resolved) {
          self->on_payload(e);
          return;
        }
        self->last_rx_ms_ = now_ms();
        self->read_tls_piece(dst, n, got + k);
      });
}

// The piece [dst, dst + n) of the payload is in: checksum it, then read the next or finish.
void Session::payload_piece_done(std::uint8_t* dst, std::size_t n) {
  if (phase_ != Phase::kClosed && !target_->resolved) {
    if (!params_.crc32c_omitted()) payload_crc_ = crc32c(dst, n, payload_crc_);
    payload_done_ += n;
    if (payload_done_ < header_.payload_len) {
      last_rx_ms_ = now_ms();
      read_payload_piece();
      return;
    }
  }
  on_payload({});
}

void Session::discard() {
  if (discard_left_ == 0) {
    read_header();
    return;
  }
  scratch_.resize(64 * 1024);
  const std::size_t n = std::min<std::uint64_t>(discard_left_, scratch_.size());
  with_stream([&](auto& s) {
    asio::async_read(s, asio::buffer(scratch_.data(), n),
                     [self = shared_from_this(), n](const asio::error_code& ec, std::size_t) {
                       if (!self->read_arrived(ec)) return;
                       self->discard_left_ -= n;
                       self->discard();
                     });
  });
}

void Session::on_payload(const asio::error_code& ec) {
  std::shared_ptr<RecvSlot> slot = std::move(target_);
  slot->reading = false;
  const std::uint64_t len = header_.payload_len;
  // Without a checksum (TLS only, see dispatch_params) the AES-GCM tags vouched for each byte.
  const bool crc_ok =
      payload_done_ == len && (params_.crc32c_omitted() || payload_crc_ == params_.crc32c());
  if (slot->ex) slot->ex->busy(-1);  // after the checksum: it reads the caller's buffer
  if (!read_arrived(ec)) return;
  if (slot->resolved) {  // abandoned meanwhile (the link is reset in that case; be safe)
    read_header();
    return;
  }
  if (!crc_ok) {
    bad_frame(corruption("payload checksum mismatch in chunk " +
                         std::to_string(params_.chunk_index()) + " of iteration " +
                         std::to_string(params_.iteration())));
    return;
  }
  if (params_.crc32c_omitted()) t_.count(&TransportStats::unchecksummed_chunks);
  t_.chunk_received(t_.peer(peer_), slot, params_, len);
  if (phase_ == Phase::kEstablished) read_header();
}

void Session::write_next() {
  if (outq_.empty() || phase_ == Phase::kClosed) {
    writing_ = false;
    if (close_after_flush_ && phase_ == Phase::kEstablished) {
      // Goodbye is out: half-close and let the read loop run until the peer closes too.
      // Closing at once could reset the connection (RST when its heartbeats are still unread),
      // and a reset makes the peer's kernel drop our Goodbye before the peer reads it.
      asio::error_code ignored;
      socket().shutdown(tcp::socket::shutdown_send, ignored);
    } else if (close_after_flush_ && phase_ != Phase::kClosed) {
      close(refused_.is_ok() ? unavailable("we said goodbye") : refused_);
    }
    return;
  }
  writing_ = true;
  OutFrame& f = outq_.front();
  if (f.op) {
    f.op->writing++;
    if (f.op->ex) f.op->ex->busy(+1);
  }
  if (tls_) {
    write_tls_from(0);
    return;
  }
  std::array<asio::const_buffer, 2> bufs{asio::buffer(*f.head), f.payload};
  asio::async_write(
      *plain_, bufs, TransferRest{asio::buffer_size(bufs)},
      [self = shared_from_this()](const asio::error_code& ec, std::size_t) { self->on_write(ec); });
}

void Session::write_tls_from(std::size_t done) {
  const OutFrame& f = outq_.front();
  const std::size_t head = f.head->size();
  const std::size_t total = head + f.payload.size();
  // The next record's plaintext: from the header or from the payload, never both.
  auto piece = [&](std::size_t at) {
    if (at < head) return asio::buffer(f.head->data() + at, std::min(head - at, kRecordPlaintext));
    const auto* p = static_cast<const std::uint8_t*>(f.payload.data()) + (at - head);
    return asio::buffer(p, std::min(total - at, kRecordPlaintext));
  };
  CoalescingStream& out = tls_->next_layer();
  asio::error_code ec;
  while (done < total && out.write_room() >= CoalescingStream::kFullRecord) {
    done += write_record(*tls_, piece(done), ec);
    if (ec) {
      on_write(ec);
      return;
    }
  }
  const bool last = done == total;
  // Last record: wait for everything; otherwise for room for the next record.
  const std::uint64_t target = last ? out.accepted() : out.room_target();
  out.async_wait_sent(target, [self = shared_from_this(), done, last](const asio::error_code& e) {
    if (e || last || self->phase_ == Phase::kClosed) {
      self->on_write(e || self->phase_ != Phase::kClosed ? e : asio::error::operation_aborted);
      return;
    }
    self->write_tls_from(done);
  });
}

void Session::on_write(const asio::error_code& ec) {
  OutFrame f = std::move(outq_.front());
  outq_.pop_front();
  writing_ = false;
  if (f.op) {
    f.op->writing--;
    if (f.op->ex) f.op->ex->busy(-1);
  }
  if (ec) {
    if (f.op) f.op->finish(unavailable("write failed: " + ec.message()));
    close(unavailable("writing to " + describe() + ": " + ec.message()));
    return;
  }
  last_tx_ms_ = now_ms();
  if (f.op) {
    t_.count_payload(peer_, true, f.payload.size());
    if (--f.op->chunks_left == 0) f.op->finish(Status::ok());
  }
  write_next();
}

}  // namespace gossip::net
