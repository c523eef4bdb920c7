// TLS 1.3 with mutual certificate authentication for peer links (asio::ssl over OpenSSL).
//
// A cluster CA signs one certificate per node; the subject names the node (CN=node-<id>) and the
// job (OU=<job id>); scripts/gen-certs.sh makes them. Both ends present their certificate, verify
// the other's chain against the cluster CA only (never the system trust store), and then check
// that the certificate names the neighbour they expect (transport.cc). Private keys readable by
// group or others are refused.
#pragma once

// clang-format off: a standard header must come first. asio/detail/config.hpp decides
// ASIO_HAS_STD_ALIGNED_ALLOC from <bits/c++config.h>; seen before it, this file's inline
// aligned_delete would free with operator delete what other files allocate with malloc.
#include <memory>
#include <string>
// clang-format on
#include <asio/ip/tcp.hpp>
#include <asio/ssl.hpp>

#include "common/status.h"
#include "net/coalescing_stream.h"

namespace gossip::net {

struct TlsConfig {
  std::string ca_file;    // PEM, the cluster CA certificate
  std::string cert_file;  // PEM, this node's certificate (may include intermediates)
  std::string key_file;   // PEM, this node's private key; mode must deny group and others
};

// PermissionDenied when `path` is readable, writable or executable by group or others;
// NotFound / IoError when it cannot be examined.
Status check_private_key_permissions(const std::string& path);

// A context for both dialing and accepting: TLS 1.3 only, AES-GCM / ChaCha20 suites, peer
// certificate required and verified against `config.ca_file` alone. Errors name the file.
Result<std::shared_ptr<asio::ssl::context>> make_tls_context(const TlsConfig& config);

// The stream every TLS link uses (transport.cc names no asio::ssl type itself), and its TCP socket.
// TLS records go through a CoalescingStream, which batches the record-sized writes and reads of
// asio::ssl::stream into large system calls (see coalescing_stream.h).
using TlsStream = asio::ssl::stream<CoalescingStream>;
inline asio::ip::tcp::socket& tls_socket(TlsStream& stream) { return stream.next_layer().socket(); }

// Asio's engine sets SSL_MODE_RELEASE_BUFFERS, so OpenSSL frees its record buffers whenever a
// read or write finds nothing more to do and allocates them again for the next record: a
// malloc/free pair per record on a busy link. Peer links are few and long-lived; keep them (about
// 34 KiB per link).
void keep_record_buffers(TlsStream& stream);

// After the handshake, moves the session's TLS records between OpenSSL and the CoalescingStream
// directly: one BIO over the stream replaces asio's BIO pair on both sides, so each byte is copied
// once in user space between the kernel's buffer and OpenSSL's record buffer (the read-ahead /
// write-behind buffer of the CoalescingStream) instead of three times (via the BIO pair and
// asio's 17 KiB engine buffers). Records are still made and opened by OpenSSL (SSL_write_ex /
// SSL_read_ex on the session asio::ssl::stream set up and authenticated); only the byte transport
// under it changes (docs/net.md, "TLS throughput"). From then on the session is used through
// write_record() + CoalescingStream::async_wait_sent() and TlsRecordReader, never through
// asio::ssl::stream's read or write operations again. Bytes the peer sent after its last
// handshake message that asio's BIO pair already holds are carried over. Call once, when
// async_handshake has completed successfully and before any other read or write.
// InternalError if OpenSSL cannot make the BIO.
Status direct_records(TlsStream& stream);

// Encrypts `data` (at most 16 KiB, one TLS 1.3 record's plaintext) into one record appended to
// the stream's write-behind buffer, to be sent by its background writer. Returns the bytes taken
// (all of them) or 0 with `ec` set: the stream's sticky write error, or the TLS error. Never
// blocks; the caller bounds the backlog (CoalescingStream::write_room) and waits for it to be
// sent (CoalescingStream::async_wait_sent). Only after direct_records().
std::size_t write_record(TlsStream& stream, asio::const_buffer data, asio::error_code& ec);

// Decrypts received records into `data`: returns the plaintext bytes (> 0), or 0 with `ec`:
// would_block when no whole record has arrived, eof after the peer's close_notify,
// asio::ssl::error::stream_truncated when the connection ends without one, or the TLS / socket
// error. Never blocks. Only after direct_records().
std::size_t read_record(TlsStream& stream, asio::mutable_buffer data, asio::error_code& ec);

// A TLS session after direct_records() as an Asio read stream (for asio::async_read): read_some
// is read_record; async_read_some decrypts what has arrived and otherwise waits for the socket
// (CoalescingStream::async_wait_readable), one read at a time. Must outlive its operations.
class TlsRecordReader {
 public:
  using executor_type = CoalescingStream::executor_type;
  explicit TlsRecordReader(TlsStream& stream) : stream_(&stream) {}
  executor_type get_executor() { return stream_->next_layer().get_executor(); }

  template <typename MutableBufferSequence>
  std::size_t read_some(const MutableBufferSequence& buffers, asio::error_code& ec) {
    return read_record(*stream_, first_nonempty(buffers), ec);
  }

  template <typename MutableBufferSequence, typename ReadToken>
  auto async_read_some(const MutableBufferSequence& buffers, ReadToken&& token) {
    return asio::async_compose<ReadToken, void(asio::error_code, std::size_t)>(
        ReadOp(stream_, first_nonempty(buffers)), token, stream_->next_layer().socket());
  }

 private:
  template <typename MutableBufferSequence>
  static asio::mutable_buffer first_nonempty(const MutableBufferSequence& buffers) {
    for (auto it = asio::buffer_sequence_begin(buffers); it != asio::buffer_sequence_end(buffers);
         ++it) {
      asio::mutable_buffer b(*it);
      if (b.size() != 0) return b;
    }
    return {};
  }

  struct ReadOp {
    ReadOp(TlsStream* s, asio::mutable_buffer d) : stream(s), data(d) {}
    TlsStream* stream;
    asio::mutable_buffer data;
    enum { kStart, kDone, kWaiting } phase = kStart;
    asio::error_code result;  // kDone: what the read at initiation gave
    std::size_t got = 0;

    template <typename Self>
    void operator()(Self& self, asio::error_code ec = {}) {
      switch (phase) {
        case kStart:
          got = data.size() == 0 ? 0 : read_record(*stream, data, result);
          if (result == asio::error::would_block) break;
          phase = kDone;  // done at once: complete, but never inside the initiation
          asio::post(stream->next_layer().get_executor(), std::move(self));
          return;
        case kDone:
          self.complete(result, got);
          return;
        case kWaiting:
          if (ec == asio::error::eof) {  // OpenSSL says how it ended (close_notify or not)
            asio::error_code tls_ec;
            const std::size_t n = read_record(*stream, data, tls_ec);
            self.complete(n != 0 || tls_ec != asio::error::would_block ? tls_ec : ec, n);
            return;
          }
          if (ec) {
            self.complete(ec, 0);
            return;
          }
          got = read_record(*stream, data, result);
          if (result != asio::error::would_block) {
            self.complete(result, got);
            return;
          }
          break;
      }
      phase = kWaiting;
      stream->next_layer().async_wait_readable(std::move(self));
    }
  };

  TlsStream* stream_;
};

struct CertIdentity {
  int node_id = -1;
  std::string job_id;
};

// Reads the node id (CN "node-<id>") and job id (OU) from a verified peer certificate.
// PermissionDenied when either is missing or malformed.
Result<CertIdentity> cert_identity(X509* cert);

// Checks this node's own certificate (the first one in `config.cert_file`) at start, so that bad
// material fails here, naming the file, instead of at every neighbour's handshake: it must be
// valid now (notBefore <= now <= notAfter), its chain (intermediates from cert_file) must verify
// against `config.ca_file` alone for both TLS client and server use, and its subject must name
// `expected` (CN node-<id>, OU job id). InvalidArgument naming the file and what is wrong, e.g.
// "node-1.pem: certificate expired on 2026-01-01 00:00:00 UTC (now 2026-11-23 ...)".
Status check_own_certificate(const TlsConfig& config, const CertIdentity& expected);

}  // namespace gossip::net
