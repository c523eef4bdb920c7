// TLS 1.3 with mutual certificate authentication for peer links (asio::ssl over OpenSSL).
//
// A cluster CA signs one certificate per node; the subject names the node (CN=node-<id>) and the
// job (OU=<job id>); scripts/gen-certs.sh makes them. Both ends present their certificate, verify
// the other's chain against the cluster CA only (never the system trust store), and then check
// that the certificate names the neighbour they expect (transport.cc). Private keys readable by
// group or others are refused.
#pragma once

#include <memory>
#include <string>

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

// Routes the session's outgoing TLS records straight into the CoalescingStream's write-behind
// buffer: a BIO over the stream replaces the write side of asio's BIO pair, so each record is
// copied once (OpenSSL's record buffer -> write-behind buffer) instead of three times (-> BIO pair
// -> engine buffer -> write-behind buffer); the sender of a bulk transfer is the side that limits
// the rate (docs/net.md, "TLS throughput"). Records are still made by OpenSSL (SSL_write_ex on the
// session asio::ssl::stream set up); reads still go through asio::ssl::stream. From then on the
// session's writes must use write_record() and CoalescingStream::async_wait_sent(): an
// asio::ssl::stream write would complete before its bytes are sent. Call once, after the handshake
// completed, with no write in flight. InternalError if OpenSSL cannot make the BIO.
Status direct_record_writes(TlsStream& stream);

// Encrypts `data` (at most 16 KiB, one TLS 1.3 record's plaintext) into one record appended to
// the stream's write-behind buffer, to be sent by its background writer. Returns the bytes taken
// (all of them) or 0 with `ec` set: the stream's sticky write error, or the TLS error. Never
// blocks; the caller bounds the backlog (CoalescingStream::write_room) and waits for it to be
// sent (CoalescingStream::async_wait_sent). Only after direct_record_writes().
std::size_t write_record(TlsStream& stream, asio::const_buffer data, asio::error_code& ec);

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
