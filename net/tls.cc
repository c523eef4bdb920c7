// TLS context set-up and certificate identity (see tls.h).
#include "net/tls.h"

#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <ctime>
#include <memory>
#include <vector>

namespace gossip::net {
namespace {

std::string openssl_errors() {
  std::string out;
  while (unsigned long e = ERR_get_error()) {
    char buf[256];
    ERR_error_string_n(e, buf, sizeof(buf));
    if (!out.empty()) out += "; ";
    out += buf;
  }
  return out.empty() ? "no OpenSSL error detail" : out;
}

Result<std::string> subject_field(X509_NAME* name, int nid, const char* what, const char* whose) {
  const int idx = X509_NAME_get_index_by_NID(name, nid, -1);
  if (idx < 0) return permission_denied(std::string(whose) + " has no " + what);
  if (X509_NAME_get_index_by_NID(name, nid, idx) >= 0) {
    return permission_denied(std::string(whose) + " has more than one " + what);
  }
  ASN1_STRING* data = X509_NAME_ENTRY_get_data(X509_NAME_get_entry(name, idx));
  unsigned char* utf8 = nullptr;
  const int len = ASN1_STRING_to_UTF8(&utf8, data);
  if (len < 0) return permission_denied(std::string("unreadable ") + what + " in " + whose);
  std::string s(reinterpret_cast<char*>(utf8), static_cast<std::size_t>(len));
  OPENSSL_free(utf8);
  return s;
}

// cert_identity for `whose` ("peer certificate" / "certificate").
Result<CertIdentity> identity_of(X509* cert, const char* whose) {
  if (cert == nullptr) return permission_denied("peer presented no certificate");
  X509_NAME* subject = X509_get_subject_name(cert);
  if (subject == nullptr) return permission_denied(std::string(whose) + " has no subject");
  GOSSIP_ASSIGN_OR_RETURN(std::string cn,
                          subject_field(subject, NID_commonName, "common name", whose));
  GOSSIP_ASSIGN_OR_RETURN(std::string ou,
                          subject_field(subject, NID_organizationalUnitName, "OU (job id)", whose));
  constexpr std::string_view kPrefix = "node-";
  CertIdentity id;
  if (cn.size() <= kPrefix.size() || cn.compare(0, kPrefix.size(), kPrefix) != 0) {
    return permission_denied(std::string(whose) + " CN '" + cn.substr(0, 64) +
                             "' is not of the form node-<id>");
  }
  const char* b = cn.data() + kPrefix.size();
  const char* e = cn.data() + cn.size();
  auto [p, err] = std::from_chars(b, e, id.node_id);
  if (err != std::errc() || p != e || id.node_id < 0) {
    return permission_denied(std::string(whose) + " CN '" + cn.substr(0, 64) +
                             "' does not end in a node id");
  }
  id.job_id = std::move(ou);
  return id;
}

// "2026-01-01 00:00:00 UTC", or "?" when the time cannot be read.
std::string format_time(const ASN1_TIME* t) {
  struct tm tm {};
  if (t == nullptr || ASN1_TIME_to_tm(t, &tm) != 1) return "?";
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%d %H:%M:%S UTC", &tm);
  return buf;
}

std::string now_utc() {
  const std::time_t now = std::time(nullptr);
  struct tm tm {};
  gmtime_r(&now, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%d %H:%M:%S UTC", &tm);
  return buf;
}

struct X509Deleter {
  void operator()(X509* x) const { X509_free(x); }
};
struct StackDeleter {
  void operator()(STACK_OF(X509) * s) const { sk_X509_pop_free(s, X509_free); }
};
struct StoreDeleter {
  void operator()(X509_STORE* s) const { X509_STORE_free(s); }
};
struct StoreCtxDeleter {
  void operator()(X509_STORE_CTX* c) const { X509_STORE_CTX_free(c); }
};
struct BioDeleter {
  void operator()(BIO* b) const { BIO_free(b); }
};

}  // namespace

Status check_private_key_permissions(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) return not_found("private key " + path + " does not exist");
    return io_error("cannot stat private key " + path + ": " + std::strerror(errno));
  }
  if ((st.st_mode & 077) != 0) {
    char mode[8];
    std::snprintf(mode, sizeof(mode), "%04o", static_cast<unsigned>(st.st_mode & 07777));
    return permission_denied("private key " + path + " is accessible by group or others (mode " +
                             mode + "); run: chmod 600 " + path);
  }
  return Status::ok();
}

Result<std::shared_ptr<asio::ssl::context>> make_tls_context(const TlsConfig& config) {
  if (config.ca_file.empty() || config.cert_file.empty() || config.key_file.empty()) {
    return invalid_argument(
        "TLS needs a CA certificate, a node certificate and a private key (or --insecure)");
  }
  GOSSIP_RETURN_IF_ERROR(check_private_key_permissions(config.key_file));
  auto ctx = std::make_shared<asio::ssl::context>(asio::ssl::context::tls);
  SSL_CTX* raw = ctx->native_handle();
  if (SSL_CTX_set_min_proto_version(raw, TLS1_3_VERSION) != 1 ||
      SSL_CTX_set_max_proto_version(raw, TLS1_3_VERSION) != 1) {
    return internal_error("cannot restrict TLS to version 1.3: " + openssl_errors());
  }
  // AES-128-GCM first: fastest with AES-NI, and the payload integrity check TLS gives us.
  if (SSL_CTX_set_ciphersuites(
          raw, "TLS_AES_128_GCM_SHA256:TLS_AES_256_GCM_SHA384:TLS_CHACHA20_POLY1305_SHA256") != 1) {
    return internal_error("cannot set TLS 1.3 cipher suites: " + openssl_errors());
  }
  asio::error_code ec;
  ctx->set_options(asio::ssl::context::default_workarounds | asio::ssl::context::single_dh_use, ec);
  ctx->load_verify_file(config.ca_file, ec);
  if (ec) {
    return invalid_argument("cannot load CA certificate " + config.ca_file + ": " + ec.message() +
                            " (" + openssl_errors() + ")");
  }
  ctx->use_certificate_chain_file(config.cert_file, ec);
  if (ec) {
    return invalid_argument("cannot load node certificate " + config.cert_file + ": " +
                            ec.message() + " (" + openssl_errors() + ")");
  }
  ctx->use_private_key_file(config.key_file, asio::ssl::context::pem, ec);
  if (ec) {
    return invalid_argument("cannot load private key " + config.key_file + ": " + ec.message() +
                            " (" + openssl_errors() + ")");
  }
  if (SSL_CTX_check_private_key(raw) != 1) {
    return invalid_argument("private key " + config.key_file + " does not match certificate " +
                            config.cert_file);
  }
  ctx->set_verify_mode(asio::ssl::verify_peer | asio::ssl::verify_fail_if_no_peer_cert, ec);
  if (ec) return internal_error("cannot set TLS verify mode: " + ec.message());
  return ctx;
}

void keep_record_buffers(TlsStream& stream) {
  SSL_clear_mode(stream.native_handle(), SSL_MODE_RELEASE_BUFFERS);
}

namespace {

// The BIO that direct_records() installs on both sides of the session. Writes append to the
// CoalescingStream (never short, never a retry); reads first return what asio's BIO pair still
// held at the switch, then what the stream's read-ahead buffer or one non-blocking recv(2) has
// (a retry when nothing has arrived, 0 at the end of the stream). The stream outlives the BIO:
// asio::ssl::stream destroys its engine, and with it the SSL object and this BIO, before its
// next layer.
struct RecordBio {
  CoalescingStream* stream = nullptr;
  std::vector<std::uint8_t> carried;  // from asio's BIO pair
  std::size_t carried_pos = 0;
  asio::error_code read_error;  // the socket's, for read_record to report
};

RecordBio& record_bio(BIO* bio) { return *static_cast<RecordBio*>(BIO_get_data(bio)); }

int record_bio_write(BIO* bio, const char* data, int len) {
  BIO_clear_retry_flags(bio);
  if (len <= 0) return 0;
  asio::error_code ec;
  record_bio(bio).stream->write_some(asio::buffer(data, static_cast<std::size_t>(len)), ec);
  return ec ? -1 : len;  // the sticky write error; write_record reports it
}

int record_bio_read(BIO* bio, char* out, int len) {
  BIO_clear_retry_flags(bio);
  if (len <= 0) return 0;
  RecordBio& rb = record_bio(bio);
  const auto want = static_cast<std::size_t>(len);
  if (rb.carried_pos < rb.carried.size()) {
    const std::size_t n = std::min(want, rb.carried.size() - rb.carried_pos);
    std::memcpy(out, rb.carried.data() + rb.carried_pos, n);
    rb.carried_pos += n;
    if (rb.carried_pos == rb.carried.size()) std::vector<std::uint8_t>().swap(rb.carried);
    return static_cast<int>(n);
  }
  asio::error_code ec;
  const std::size_t n = rb.stream->read_some(asio::buffer(out, want), ec);
  if (!ec) return static_cast<int>(n);
  if (ec == asio::error::would_block || ec == asio::error::try_again) {
    BIO_set_retry_read(bio);
    return -1;
  }
  if (ec == asio::error::eof) return 0;
  rb.read_error = ec;
  return -1;
}

long record_bio_ctrl(BIO*, int cmd, long, void*) {
  // OpenSSL flushes its write BIO after handshake messages and alerts; the stream's background
  // writer sends what is buffered on its own.
  return cmd == BIO_CTRL_FLUSH ? 1 : 0;
}

int record_bio_create(BIO* bio) {
  BIO_set_data(bio, new RecordBio);
  BIO_set_init(bio, 1);
  return 1;
}

int record_bio_destroy(BIO* bio) {
  delete static_cast<RecordBio*>(BIO_get_data(bio));
  BIO_set_data(bio, nullptr);
  return 1;
}

const BIO_METHOD* record_bio_method() {
  static BIO_METHOD* const method = [] {
    BIO_METHOD* m = BIO_meth_new(BIO_get_new_index() | BIO_TYPE_SOURCE_SINK, "gossip records");
    if (m == nullptr) return m;
    BIO_meth_set_write(m, record_bio_write);
    BIO_meth_set_read(m, record_bio_read);
    BIO_meth_set_ctrl(m, record_bio_ctrl);
    BIO_meth_set_create(m, record_bio_create);
    BIO_meth_set_destroy(m, record_bio_destroy);
    return m;
  }();
  return method;
}

}  // namespace

Status direct_records(TlsStream& stream) {
  const BIO_METHOD* method = record_bio_method();
  BIO* bio = method ? BIO_new(method) : nullptr;
  if (bio == nullptr)
    return internal_error("cannot create the TLS record BIO: " + openssl_errors());
  RecordBio& rb = record_bio(bio);
  rb.stream = &stream.next_layer();
  SSL* ssl = stream.native_handle();
  // What the peer sent after its last handshake message and asio already fed to OpenSSL (the
  // pair is drained whenever OpenSSL asks for more, so this is all asio holds: nothing waits in
  // its engine buffer).
  BIO* pair = SSL_get_rbio(ssl);
  char chunk[4096];
  for (int n; (n = BIO_read(pair, chunk, sizeof(chunk))) > 0;) {
    rb.carried.insert(rb.carried.end(), chunk, chunk + n);
  }
  // SSL_set_bio takes one reference to `bio` for each side (it adds the second) and drops the
  // pair's two (asio's engine keeps the pair's other end and frees it).
  SSL_set_bio(ssl, bio, bio);
  return Status::ok();
}

std::size_t write_record(TlsStream& stream, asio::const_buffer data, asio::error_code& ec) {
  ec = {};
  if (data.size() == 0) return 0;
  SSL* ssl = stream.native_handle();
  ERR_clear_error();
  std::size_t written = 0;
  const int ok = SSL_write_ex(ssl, data.data(), data.size(), &written);
  if (ok == 1 && written == data.size()) return written;
  if (ok == 1) {  // one record per call: a short write would be a bug in the caller's sizing
    ec = asio::error::message_size;
    return 0;
  }
  if (const asio::error_code sticky = stream.next_layer().write_error()) {
    ec = sticky;
  } else if (const unsigned long e = ERR_get_error(); e != 0) {
    ec = asio::error_code(static_cast<int>(e), asio::error::get_ssl_category());
  } else {
    ec = asio::error::connection_aborted;
  }
  return 0;
}

std::size_t read_record(TlsStream& stream, asio::mutable_buffer data, asio::error_code& ec) {
  ec = {};
  if (data.size() == 0) return 0;
  SSL* ssl = stream.native_handle();
  ERR_clear_error();
  std::size_t got = 0;
  const int ok = SSL_read_ex(ssl, data.data(), data.size(), &got);
  if (ok == 1) return got;
  RecordBio& rb = record_bio(SSL_get_rbio(ssl));
  switch (SSL_get_error(ssl, ok)) {
    case SSL_ERROR_WANT_READ:
      ec = asio::error::would_block;
      break;
    case SSL_ERROR_ZERO_RETURN:  // close_notify
      ec = asio::error::eof;
      break;
    case SSL_ERROR_SYSCALL:
      ec = rb.read_error ? rb.read_error : asio::ssl::error::stream_truncated;
      break;
    default: {
      const unsigned long e = ERR_peek_last_error();
      if (rb.read_error) {
        ec = rb.read_error;
      } else if (ERR_GET_LIB(e) == ERR_LIB_SSL &&
                 ERR_GET_REASON(e) == SSL_R_UNEXPECTED_EOF_WHILE_READING) {
        ec = asio::ssl::error::stream_truncated;  // the end of the stream without close_notify
      } else if (e != 0) {
        ec = asio::error_code(static_cast<int>(e), asio::error::get_ssl_category());
      } else {
        ec = asio::error::connection_aborted;
      }
    }
  }
  ERR_clear_error();
  return 0;
}

Result<CertIdentity> cert_identity(X509* cert) { return identity_of(cert, "peer certificate"); }

Status check_own_certificate(const TlsConfig& config, const CertIdentity& expected) {
  const std::string& file = config.cert_file;
  ERR_clear_error();
  // The leaf first, then any intermediates, as use_certificate_chain_file reads them.
  std::unique_ptr<BIO, BioDeleter> bio(BIO_new_file(file.c_str(), "r"));
  if (!bio) {
    return invalid_argument("cannot open node certificate " + file + ": " + openssl_errors());
  }
  std::unique_ptr<X509, X509Deleter> leaf(
      PEM_read_bio_X509_AUX(bio.get(), nullptr, nullptr, nullptr));
  if (!leaf) {
    return invalid_argument("cannot load node certificate " + file + ": " + openssl_errors());
  }
  std::unique_ptr<STACK_OF(X509), StackDeleter> chain(sk_X509_new_null());
  while (X509* x = PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr)) {
    sk_X509_push(chain.get(), x);
  }
  ERR_clear_error();  // the loop above ends on "no start line"

  // Validity period, checked first so that an expired certificate is not reported as a chain
  // failure.
  const ASN1_TIME* not_before = X509_get0_notBefore(leaf.get());
  const ASN1_TIME* not_after = X509_get0_notAfter(leaf.get());
  if (X509_cmp_current_time(not_after) <= 0) {
    return invalid_argument(file + ": certificate expired on " + format_time(not_after) + " (now " +
                            now_utc() + "); make a new one (scripts/gen-certs.sh)");
  }
  if (X509_cmp_current_time(not_before) >= 0) {
    return invalid_argument(file + ": certificate is not valid before " + format_time(not_before) +
                            " (now " + now_utc() + "); check this machine's clock");
  }

  // Chain against the cluster CA only (never the system store), for both roles a node plays.
  std::unique_ptr<X509_STORE, StoreDeleter> store(X509_STORE_new());
  if (!store || X509_STORE_load_file(store.get(), config.ca_file.c_str()) != 1) {
    return invalid_argument("cannot load CA certificate " + config.ca_file + ": " +
                            openssl_errors());
  }
  for (int purpose : {X509_PURPOSE_SSL_CLIENT, X509_PURPOSE_SSL_SERVER}) {
    std::unique_ptr<X509_STORE_CTX, StoreCtxDeleter> ctx(X509_STORE_CTX_new());
    if (!ctx || X509_STORE_CTX_init(ctx.get(), store.get(), leaf.get(), chain.get()) != 1) {
      return internal_error("cannot set up certificate verification: " + openssl_errors());
    }
    X509_STORE_CTX_set_purpose(ctx.get(), purpose);
    if (X509_verify_cert(ctx.get()) != 1) {
      const int err = X509_STORE_CTX_get_error(ctx.get());
      ERR_clear_error();
      return invalid_argument(
          file + ": certificate does not verify against the CA in " + config.ca_file + ": " +
          X509_verify_cert_error_string(err) +
          (err == X509_V_ERR_UNABLE_TO_GET_ISSUER_CERT_LOCALLY ||
                   err == X509_V_ERR_UNABLE_TO_GET_ISSUER_CERT ||
                   err == X509_V_ERR_CERT_SIGNATURE_FAILURE
               ? " (signed by another CA?)"
               : "") +
          (purpose == X509_PURPOSE_SSL_CLIENT ? " (as a TLS client)" : " (as a TLS server)"));
    }
  }

  // The subject must name this node and this job.
  Result<CertIdentity> id = identity_of(leaf.get(), "certificate");
  if (!id.is_ok()) return invalid_argument(file + ": " + id.status().message());
  if (id->node_id != expected.node_id) {
    return invalid_argument(file + ": certificate names node-" + std::to_string(id->node_id) +
                            ", but this is node " + std::to_string(expected.node_id) +
                            " (expected CN node-" + std::to_string(expected.node_id) + ")");
  }
  if (id->job_id != expected.job_id) {
    return invalid_argument(file + ": certificate is for job '" + id->job_id.substr(0, 64) +
                            "', but this job is '" + expected.job_id + "'");
  }
  return Status::ok();
}

}  // namespace gossip::net
