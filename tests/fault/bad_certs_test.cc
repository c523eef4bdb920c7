// Hostile and broken certificates and keys (issue 8), through the TLS set-up every node runs
// (net::make_tls_context, net::Transport::start) and real TLS 1.3 handshakes on loopback:
// missing files, garbage PEM, a key readable by others, a key for another certificate, an expired
// certificate, one signed by another CA, one naming another node. A node's own bad material must
// fail at start with a message naming the file; a neighbour's bad certificate must be refused at
// the handshake (counted in stats, no link), while the same set-up with good certificates
// connects (the control that shows each case fails for its reason).
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <sys/stat.h>

#include <cstdio>

#include "net/tls.h"
#include "net/transport.h"
#include "tests/fault/fault_test_util.h"
#include "tests/support/eventually.h"

namespace gossip::fault_testing {
namespace {

constexpr const char* kJob = "job-fault";

using gossip::testing::run_shell;

// Certificates for the whole test process, made once: `good` (CA 1, nodes 0..2, by
// scripts/gen-certs.sh), `other_ca` (CA 2, nodes 0..2), and `expired` (CA 1's ca.pem, an expired
// node-1 certificate signed by CA 1).
struct Certs {
  std::string root, good, other_ca, expired;
  Certs() {
    static TempDir dir;
    root = dir.path;
    good = root + "/good";
    other_ca = root + "/other";
    expired = root + "/expired";
    const std::string gen = source("scripts/gen-certs.sh");
    REQUIRE(run_shell(gen + " " + good + " 3 " + kJob + " 2>/dev/null") == 0);
    REQUIRE(run_shell(gen + " " + other_ca + " 3 " + kJob + " 2>/dev/null") == 0);
    REQUIRE(run_shell("mkdir -p " + expired + " && cp " + good + "/ca.pem " + expired +
                      "/ca.pem") == 0);
    // -days -1: notAfter lies one day before notBefore, i.e. already expired.
    REQUIRE(run_shell("cd " + expired +
                      " && umask 077 && "
                      "openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes "
                      "-keyout node-1.key -out node-1.csr -subj /O=gossip-sgd/OU=" +
                      std::string(kJob) +
                      "/CN=node-1 2>/dev/null && "
                      "openssl x509 -req -in node-1.csr -CA " +
                      good + "/ca.pem -CAkey " + good +
                      "/ca.key -CAcreateserial -out node-1.pem -days -1 2>/dev/null && "
                      "chmod 644 node-1.pem") == 0);
  }
};

const Certs& certs() {
  static Certs c;
  return c;
}

net::TlsConfig tls(const std::string& dir, int id) {
  return {dir + "/ca.pem", dir + "/node-" + std::to_string(id) + ".pem",
          dir + "/node-" + std::to_string(id) + ".key"};
}

// Copies a certificate set's files for `id` into a fresh directory (so modes can be changed).
std::string copy_set(const TempDir& into, const std::string& from, int id) {
  const std::string n = "node-" + std::to_string(id);
  REQUIRE(run_shell("cp -p " + from + "/ca.pem " + from + "/" + n + ".pem " + from + "/" + n +
                    ".key " + into.path + "/") == 0);
  return into.path;
}

void expect_refused(const net::TlsConfig& config, const std::string& file,
                    const std::string& what) {
  auto r = net::make_tls_context(config);
  INFO("message: ", r.status().message());
  REQUIRE_FALSE(r.is_ok());
  CHECK(contains(r.status().message(), file));
  CHECK(contains(r.status().message(), what));
}

TEST_CASE("control: the generated certificates load") {
  auto r = net::make_tls_context(tls(certs().good, 0));
  CHECK_MESSAGE(r.is_ok(), r.status().to_string());
}

TEST_CASE("missing CA, certificate or key files are refused naming the file") {
  const auto good = tls(certs().good, 0);
  auto c = good;
  c.ca_file = "/nonexistent/ca.pem";
  expect_refused(c, "/nonexistent/ca.pem", "CA certificate");
  c = good;
  c.cert_file = "/nonexistent/node-0.pem";
  expect_refused(c, "/nonexistent/node-0.pem", "certificate");
  c = good;
  c.key_file = "/nonexistent/node-0.key";
  expect_refused(c, "/nonexistent/node-0.key", "does not exist");
  CHECK(net::make_tls_context({}).status().message().find("--insecure") != std::string::npos);
}

TEST_CASE("garbage instead of PEM is refused naming the file") {
  TempDir d;
  const std::string dir = copy_set(d, certs().good, 0);
  d.write("node-0.pem",
          "-----BEGIN CERTIFICATE-----\nnot base64 at all\n-----END CERTIFICATE-----\n");
  expect_refused(tls(dir, 0), dir + "/node-0.pem", "cannot load node certificate");
  d.write("ca.pem", std::string("\x00\x01\x02 binary", 9));
  expect_refused(tls(dir, 0), dir + "/ca.pem", "cannot load CA certificate");
}

TEST_CASE("a private key readable or writable by group or others is refused with the fix") {
  TempDir d;
  const std::string dir = copy_set(d, certs().good, 0);
  const std::string key = dir + "/node-0.key";
  for (mode_t mode : {0644, 0640, 0604, 0660, 0602, 0610}) {
    CAPTURE(mode);
    REQUIRE(::chmod(key.c_str(), mode) == 0);
    auto r = net::make_tls_context(tls(dir, 0));
    REQUIRE_FALSE(r.is_ok());
    CHECK(r.status().code() == StatusCode::kPermissionDenied);
    CHECK(contains(r.status().message(), key));
    CHECK(contains(r.status().message(), "chmod 600"));
  }
  for (mode_t mode : {0600, 0400}) {
    REQUIRE(::chmod(key.c_str(), mode) == 0);
    CHECK(net::make_tls_context(tls(dir, 0)).is_ok());
  }
}

TEST_CASE("a key that belongs to another certificate is refused") {
  auto c = tls(certs().good, 0);
  c.key_file = certs().good + "/node-1.key";
  expect_refused(c, c.key_file, "mismatch");
}

// ---- A node's own certificate, checked at start (net::check_own_certificate; Transport::start
// calls it right after make_tls_context). Each case fails for its reason: the control below passes
// the same function with the good set, and each bad set differs from it in one respect.

net::CertIdentity me(int id, const std::string& job = kJob) { return {id, job}; }

void expect_own_refused(const net::TlsConfig& config, const net::CertIdentity& expected,
                        const std::vector<std::string>& wanted) {
  // The material itself loads: only the new check can refuse it.
  REQUIRE_MESSAGE(net::make_tls_context(config).is_ok(), "make_tls_context refused the set");
  const Status s = net::check_own_certificate(config, expected);
  INFO("message: ", s.message());
  REQUIRE_FALSE(s.is_ok());
  CHECK(s.code() == StatusCode::kInvalidArgument);
  for (const std::string& w : wanted) CHECK(contains(s.message(), w));
}

TEST_CASE("control: every good own certificate passes the start check") {
  for (int id = 0; id < 3; ++id) {
    const Status s = net::check_own_certificate(tls(certs().good, id), me(id));
    CHECK_MESSAGE(s.is_ok(), s.to_string());
  }
}

TEST_CASE("own certificate expired: refused at start naming the file and the date") {
  const std::string pem = certs().expired + "/node-1.pem";
  // The expiry date openssl itself reads from the file, in the message's format.
  const ProcessResult openssl =
      run_process({"openssl", "x509", "-noout", "-enddate", "-dateopt", "iso_8601", "-in", pem});
  const bool got = !openssl.out.empty();
  REQUIRE(got);
  // "notAfter=2026-11-22 00:43:11Z" -> "2026-11-22 00:43:11"
  std::string date = openssl.out.substr(0, openssl.out.find('\n'));
  date = date.substr(date.find('=') + 1, 19);
  expect_own_refused(tls(certs().expired, 1), me(1), {pem, "expired on " + date + " UTC"});
}

// Re-signs node `id`'s certificate of the good set with CA 1, valid from tomorrow for a day.
std::string not_yet_valid(const TempDir& into, int id) {
  // One PEM object from file f with `read` (PEM_read_X509, PEM_read_PrivateKey); must succeed.
  auto read_pem = [](const std::string& f, auto* read) {
    FILE* fp = std::fopen(f.c_str(), "r");
    REQUIRE(fp != nullptr);
    auto* object = read(fp, nullptr, nullptr, nullptr);
    std::fclose(fp);
    REQUIRE(object != nullptr);
    return object;
  };
  auto read_cert = [&](const std::string& f) { return read_pem(f, &PEM_read_X509); };
  auto read_key = [&](const std::string& f) { return read_pem(f, &PEM_read_PrivateKey); };
  const std::string n = certs().good + "/node-" + std::to_string(id);
  X509* orig = read_cert(n + ".pem");
  X509* ca = read_cert(certs().good + "/ca.pem");
  EVP_PKEY* ca_key = read_key(certs().good + "/ca.key");
  X509* x = X509_dup(orig);
  REQUIRE(X509_gmtime_adj(X509_getm_notBefore(x), 86400) != nullptr);
  REQUIRE(X509_gmtime_adj(X509_getm_notAfter(x), 2 * 86400) != nullptr);
  REQUIRE(X509_set_issuer_name(x, X509_get_subject_name(ca)) == 1);
  REQUIRE(X509_sign(x, ca_key, EVP_sha256()) > 0);
  const std::string out = into.path + "/future.pem";
  FILE* fp = std::fopen(out.c_str(), "w");
  REQUIRE(fp != nullptr);
  REQUIRE(PEM_write_X509(fp, x) == 1);
  std::fclose(fp);
  X509_free(x);
  X509_free(orig);
  X509_free(ca);
  EVP_PKEY_free(ca_key);
  return out;
}

TEST_CASE("own certificate not yet valid: refused at start naming the file and the clock") {
  TempDir d;
  auto c = tls(certs().good, 1);
  c.cert_file = not_yet_valid(d, 1);
  expect_own_refused(c, me(1), {c.cert_file, "not valid before", "clock"});
}

TEST_CASE("own certificate signed by another CA: refused at start naming the files") {
  auto c = tls(certs().good, 0);
  c.cert_file = certs().other_ca + "/node-0.pem";
  c.key_file = certs().other_ca + "/node-0.key";
  expect_own_refused(c, me(0),
                     {c.cert_file, c.ca_file, "does not verify against the CA", "another CA"});
  // The same certificate with its own CA passes: it is the CA that is wrong, not the file.
  CHECK(net::check_own_certificate(tls(certs().other_ca, 0), me(0)).is_ok());
}

TEST_CASE("own certificate naming another node: refused at start naming the file and both ids") {
  const auto c = tls(certs().good, 2);  // node 2's certificate, configured on node 1
  expect_own_refused(c, me(1), {c.cert_file, "node-2", "this is node 1"});
}

TEST_CASE("own certificate of another job: refused at start naming the file and both jobs") {
  TempDir d;
  REQUIRE(run_shell(source("scripts/gen-certs.sh") + " " + d.path + " 1 job-other 2>/dev/null") ==
          0);
  const auto c = tls(d.path, 0);
  expect_own_refused(c, me(0), {c.cert_file, "job-other", kJob});
  CHECK(net::check_own_certificate(c, me(0, "job-other")).is_ok());
}

TEST_CASE("own certificate file without a certificate: refused naming the file") {
  TempDir d;
  d.write("empty.pem", "no PEM here\n");
  auto c = tls(certs().good, 0);
  c.cert_file = d.path + "/empty.pem";
  const Status s = net::check_own_certificate(c, me(0));
  REQUIRE_FALSE(s.is_ok());
  CHECK(contains(s.message(), c.cert_file));
}

// ---- A neighbour's certificate, checked at the handshake.

net::TransportOptions options(int id, const net::TlsConfig& t,
                              std::vector<net::PeerAddress> neighbours) {
  net::TransportOptions o;
  o.self = {kJob, id, 77, 64};
  o.listen_host = "127.0.0.1";
  o.tls = t;
  o.neighbours = std::move(neighbours);
  o.handshake_timeout_ms = 2000;
  o.connect_backoff_max_ms = 100;
  o.heartbeat_interval_ms = 100;
  o.peer_timeout_ms = 2000;
  return o;
}

using gossip::testing::eventually;

// Node 1 with `peer_tls` (possibly bad) listens; node 0 with good certificates dials it (the
// lower id dials). True when node 0 refused the handshake and no link came up within the time a
// good handshake takes.
struct Handshake {
  bool connected = false;
  std::uint64_t rejected_by_0 = 0, rejected_by_1 = 0;
};

Handshake handshake_with(const net::TlsConfig& peer_tls, int claimed_id = 1) {
  net::TransportOptions bad_peer = options(claimed_id, peer_tls, {{0, "127.0.0.1", 0}});
  bad_peer.check_own_certificate = false;  // a misconfigured peer gets past its own start check
  auto one = net::Transport::start(bad_peer);
  REQUIRE_MESSAGE(one.is_ok(), one.status().to_string());
  auto zero = net::Transport::start(
      options(0, tls(certs().good, 0), {{claimed_id, "127.0.0.1", (*one)->port()}}));
  REQUIRE_MESSAGE(zero.is_ok(), zero.status().to_string());
  Handshake h;
  const int want[] = {claimed_id};
  h.connected = (*zero)->wait_connected(want, net::deadline_in_ms(1500));
  if (!h.connected)
    eventually([&] {
      return (*zero)->stats().handshakes_rejected + (*one)->stats().handshakes_rejected > 0;
    });
  h.rejected_by_0 = (*zero)->stats().handshakes_rejected;
  h.rejected_by_1 = (*one)->stats().handshakes_rejected;
  (*zero)->shutdown(100);
  (*one)->shutdown(100);
  return h;
}

TEST_CASE("Transport::start refuses its own bad certificate, naming the file") {
  // Node 1 holding node 2's (valid, same-CA) certificate; and an expired one of its own.
  auto wrong = net::Transport::start(options(1, tls(certs().good, 2), {{0, "127.0.0.1", 0}}));
  REQUIRE_FALSE(wrong.is_ok());
  CHECK(wrong.status().code() == StatusCode::kInvalidArgument);
  CHECK(contains(wrong.status().message(), tls(certs().good, 2).cert_file));
  CHECK(contains(wrong.status().message(), "node-2"));
  auto expired = net::Transport::start(options(1, tls(certs().expired, 1), {{0, "127.0.0.1", 0}}));
  REQUIRE_FALSE(expired.is_ok());
  CHECK(contains(expired.status().message(), "expired"));
  // The same certificates start fine once the check is off (what the handshake tests below use).
  net::TransportOptions unchecked = options(1, tls(certs().good, 2), {{0, "127.0.0.1", 0}});
  unchecked.check_own_certificate = false;
  auto started = net::Transport::start(unchecked);
  REQUIRE_MESSAGE(started.is_ok(), started.status().to_string());
  (*started)->shutdown(100);
}

TEST_CASE("control: a neighbour with a good certificate connects") {
  const Handshake h = handshake_with(tls(certs().good, 1));
  CHECK(h.connected);
  CHECK(h.rejected_by_0 == 0);
}

TEST_CASE("a neighbour's expired certificate is refused at the handshake") {
  const Handshake h = handshake_with(tls(certs().expired, 1));
  CHECK_FALSE(h.connected);
  CHECK(h.rejected_by_0 >= 1);
}

TEST_CASE("a neighbour's certificate signed by another CA is refused at the handshake") {
  const Handshake h = handshake_with(tls(certs().other_ca, 1));
  CHECK_FALSE(h.connected);
  CHECK(h.rejected_by_0 + h.rejected_by_1 >= 1);
}

TEST_CASE("a neighbour presenting a valid certificate of another node is refused") {
  // Node 0 expects node 1; the process there holds node 2's certificate (a valid one of this
  // cluster) and claims to be node 1.
  auto t = tls(certs().good, 2);
  const Handshake h = handshake_with(t, 1);
  CHECK_FALSE(h.connected);
  CHECK(h.rejected_by_0 + h.rejected_by_1 >= 1);
}

}  // namespace
}  // namespace gossip::fault_testing
