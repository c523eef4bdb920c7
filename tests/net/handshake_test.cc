// Hello checks: each mismatching field is named in the error; handshake frame decoding.
#include "net/handshake.h"

#include <doctest/doctest.h>

namespace gossip::net {

TEST_CASE("check_peer_hello accepts a matching peer and names each mismatch") {
  const Identity me{"job-a", 1, 0xABCD, 1000};
  const Identity peer{"job-a", 2, 0xABCD, 1000};
  CHECK(check_peer_hello(make_hello(peer, 2, 5), me, 2).is_ok());

  auto expect = [&](pb::Hello h, int expected, const char* words, StatusCode code) {
    Status s = check_peer_hello(h, me, expected);
    CAPTURE(s.to_string());
    CHECK(s.code() == code);
    CHECK(s.message().find(words) != std::string::npos);
  };
  expect(make_hello(peer, 2, 0), 3, "expected node 3", StatusCode::kPermissionDenied);
  pb::Hello h = make_hello(peer, 2, 0);
  h.set_job_id("job-b");
  expect(h, 2, "job id mismatch", StatusCode::kInvalidArgument);
  h = make_hello(peer, 2, 0);
  h.set_topology_fingerprint(0x1234);
  expect(h, 2, "topology fingerprint mismatch: peer 0x1234, ours 0xabcd",
         StatusCode::kInvalidArgument);
  h = make_hello(peer, 2, 0);
  h.mutable_model()->set_param_count(999);
  expect(h, 2, "model fingerprint mismatch", StatusCode::kInvalidArgument);
  h = make_hello(peer, 2, 0);
  h.mutable_model()->set_dtype(pb::DTYPE_UNSPECIFIED);
  expect(h, 2, "dtype", StatusCode::kInvalidArgument);
  h = make_hello(peer, 2, 0);
  h.set_protocol_version(2);
  expect(h, 2, "protocol version", StatusCode::kInvalidArgument);
}

TEST_CASE("check_peer_hello refuses a peer of another algorithm and names both") {
  Identity me{"job-a", 1, 0xABCD, 1000};
  Identity peer{"job-a", 2, 0xABCD, 1000};
  // Both default (no algorithm announced, as peers before the field): accepted.
  CHECK(make_hello(peer, 2, 0).extra().count("algorithm") == 0);
  CHECK(check_peer_hello(make_hello(peer, 2, 0), me, 2).is_ok());
  peer.algorithm = "allreduce";
  Status s = check_peer_hello(make_hello(peer, 2, 0), me, 2);
  CHECK(s.code() == StatusCode::kInvalidArgument);
  CHECK(s.message().find("algorithm mismatch: peer runs 'allreduce', ours default (dpsgd)") !=
        std::string::npos);
  me.algorithm = "allreduce";
  CHECK(check_peer_hello(make_hello(peer, 2, 0), me, 2).is_ok());
  peer.algorithm.clear();
  s = check_peer_hello(make_hello(peer, 2, 0), me, 2);
  CHECK(s.message().find("peer runs default (dpsgd), ours 'allreduce'") != std::string::npos);
}

TEST_CASE("decode_hello_frame takes exactly one Hello frame") {
  const Identity peer{"job-a", 2, 7, 10};
  pb::Hello h = make_hello(peer, 3, 9);
  (*h.mutable_extra())["role"] = "worker";
  const std::string f = encode_frame(FrameType::kHello, h);
  const auto* b = reinterpret_cast<const std::uint8_t*>(f.data());
  auto got = decode_hello_frame({b, f.size()});
  REQUIRE(got.is_ok());
  CHECK(got->degree() == 3);
  CHECK(got->iteration() == 9);
  CHECK(got->extra().at("role") == "worker");
  CHECK(!decode_hello_frame({b, f.size() - 1}).is_ok());
  CHECK(!decode_hello_ack_frame({b, f.size()}).is_ok());
  std::string g = f + "x";
  CHECK(!decode_hello_frame({reinterpret_cast<const std::uint8_t*>(g.data()), g.size()}).is_ok());
}

}  // namespace gossip::net
