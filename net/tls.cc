// TLS context set-up and certificate identity (see tls.h).
#include "net/tls.h"

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <sys/stat.h>

#include <cerrno>
#include <charconv>
#include <cstring>

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

Result<std::string> subject_field(X509_NAME* name, int nid, const char* what) {
  const int idx = X509_NAME_get_index_by_NID(name, nid, -1);
  if (idx < 0) return permission_denied(std::string("peer certificate has no ") + what);
  if (X509_NAME_get_index_by_NID(name, nid, idx) >= 0) {
    return permission_denied(std::string("peer certificate has more than one ") + what);
  }
  ASN1_STRING* data = X509_NAME_ENTRY_get_data(X509_NAME_get_entry(name, idx));
  unsigned char* utf8 = nullptr;
  const int len = ASN1_STRING_to_UTF8(&utf8, data);
  if (len < 0) return permission_denied(std::string("unreadable ") + what + " in peer certificate");
  std::string s(reinterpret_cast<char*>(utf8), static_cast<std::size_t>(len));
  OPENSSL_free(utf8);
  return s;
}

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
  ctx->set_options(asio::ssl::context::default_workarounds | asio::ssl::context::single_dh_use,
                   ec);
  ctx->load_verify_file(config.ca_file, ec);
  if (ec) {
    return invalid_argument("cannot load CA certificate " + config.ca_file + ": " +
                            ec.message() + " (" + openssl_errors() + ")");
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

Result<CertIdentity> cert_identity(X509* cert) {
  if (cert == nullptr) return permission_denied("peer presented no certificate");
  X509_NAME* subject = X509_get_subject_name(cert);
  if (subject == nullptr) return permission_denied("peer certificate has no subject");
  GOSSIP_ASSIGN_OR_RETURN(std::string cn, subject_field(subject, NID_commonName, "common name"));
  GOSSIP_ASSIGN_OR_RETURN(std::string ou,
                          subject_field(subject, NID_organizationalUnitName, "OU (job id)"));
  constexpr std::string_view kPrefix = "node-";
  CertIdentity id;
  if (cn.size() <= kPrefix.size() || cn.compare(0, kPrefix.size(), kPrefix) != 0) {
    return permission_denied("peer certificate CN '" + cn.substr(0, 64) +
                             "' is not of the form node-<id>");
  }
  const char* b = cn.data() + kPrefix.size();
  const char* e = cn.data() + cn.size();
  auto [p, err] = std::from_chars(b, e, id.node_id);
  if (err != std::errc() || p != e || id.node_id < 0) {
    return permission_denied("peer certificate CN '" + cn.substr(0, 64) +
                             "' does not end in a node id");
  }
  id.job_id = std::move(ou);
  return id;
}

}  // namespace gossip::net
