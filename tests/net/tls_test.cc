// TLS material: key permission check, context errors naming the file, certificate identity.
#include "net/tls.h"

#include <doctest/doctest.h>
#include <openssl/pem.h>
#include <sys/stat.h>

#include <cstdio>

#include "net_test_util.h"

namespace gossip::net {

TEST_CASE("a private key readable by group or others is refused") {
  const std::string dir = testing::cert_dir();
  REQUIRE(!dir.empty());
  const std::string key = dir + "/node-1.key";
  CHECK(check_private_key_permissions(key).is_ok());
  const std::string copy = dir + "/loose.key";
  gossip::testing::run_shell("cp " + key + " " + copy + " && chmod 640 " + copy);
  Status s = check_private_key_permissions(copy);
  CHECK(s.code() == StatusCode::kPermissionDenied);
  CHECK(s.message().find("chmod 600") != std::string::npos);
  TlsConfig cfg{dir + "/ca.pem", dir + "/node-1.pem", copy};
  CHECK(make_tls_context(cfg).status().code() == StatusCode::kPermissionDenied);
  CHECK(check_private_key_permissions(dir + "/missing.key").code() == StatusCode::kNotFound);
}

TEST_CASE("make_tls_context loads the generated files and names a bad one") {
  const std::string dir = testing::cert_dir();
  CHECK(make_tls_context(testing::tls_for(dir, 3)).is_ok());
  TlsConfig cfg = testing::tls_for(dir, 3);
  cfg.cert_file = dir + "/node-4.pem";  // does not match node-3.key
  auto r = make_tls_context(cfg);
  CHECK(!r.is_ok());
  CHECK(r.status().message().find("node-3.key") != std::string::npos);
  cfg = testing::tls_for(dir, 3);
  cfg.ca_file = dir + "/nope.pem";
  CHECK(make_tls_context(cfg).status().message().find("nope.pem") != std::string::npos);
}

TEST_CASE("cert_identity reads node id and job from the subject") {
  const std::string dir = testing::cert_dir();
  FILE* f = std::fopen((dir + "/node-7.pem").c_str(), "r");
  REQUIRE(f != nullptr);
  X509* cert = PEM_read_X509(f, nullptr, nullptr, nullptr);
  std::fclose(f);
  REQUIRE(cert != nullptr);
  auto id = cert_identity(cert);
  REQUIRE(id.is_ok());
  CHECK(id->node_id == 7);
  CHECK(id->job_id == testing::kJob);
  X509_free(cert);
  // The CA certificate's CN is not node-<id>.
  f = std::fopen((dir + "/ca.pem").c_str(), "r");
  cert = PEM_read_X509(f, nullptr, nullptr, nullptr);
  std::fclose(f);
  CHECK(cert_identity(cert).status().code() == StatusCode::kPermissionDenied);
  X509_free(cert);
  CHECK(!cert_identity(nullptr).is_ok());
}

}  // namespace gossip::net
