// Frame header encoding and every check that runs before allocation; Params validation.
#include "net/frame.h"

#include <doctest/doctest.h>

#include <cstring>

namespace gossip::net {
namespace {

FrameHeaderBytes header(FrameType t, std::uint32_t hlen, std::uint64_t plen) {
  return encode_frame_header({t, hlen, plen});
}

pb::Params params(std::uint32_t index, std::uint32_t count, std::uint64_t offset) {
  pb::Params p;
  p.set_sender(1);
  p.set_iteration(7);
  p.set_chunk_index(index);
  p.set_chunk_count(count);
  p.set_byte_offset(offset);
  return p;
}

}  // namespace

TEST_CASE("frame header round-trips and has the documented layout") {
  const auto b = header(FrameType::kParams, 42, 4096);
  CHECK(b[0] == 'G');
  CHECK(b[1] == 'S');
  CHECK(b[2] == 'S');
  CHECK(b[3] == 'P');
  CHECK(b[4] == kProtocolVersion);
  CHECK(b[5] == 3);
  auto h = decode_frame_header(b, session_limits(1 << 20));
  REQUIRE(h.is_ok());
  CHECK(h->type == FrameType::kParams);
  CHECK(h->header_len == 42);
  CHECK(h->payload_len == 4096);
}

TEST_CASE("frame header checks reject each malformed field") {
  const FrameLimits lim = session_limits(1 << 20);
  SUBCASE("bad magic (e.g. a TLS ClientHello)") {
    auto b = header(FrameType::kHeartbeat, 4, 0);
    b[0] = 0x16;
    CHECK(decode_frame_header(b, lim).status().code() == StatusCode::kCorruption);
  }
  SUBCASE("other protocol version") {
    auto b = header(FrameType::kHeartbeat, 4, 0);
    b[4] = 9;
    CHECK(decode_frame_header(b, lim).status().message().find("version") != std::string::npos);
  }
  SUBCASE("unknown type") {
    auto b = header(FrameType::kHeartbeat, 4, 0);
    b[5] = 77;
    CHECK(!decode_frame_header(b, lim).is_ok());
  }
  SUBCASE("reserved flags") {
    auto b = header(FrameType::kHeartbeat, 4, 0);
    b[6] = 1;
    CHECK(!decode_frame_header(b, lim).is_ok());
  }
  SUBCASE("oversized message header") {
    auto s = decode_frame_header(header(FrameType::kParams, 1u << 30, 16), lim).status();
    CHECK(s.code() == StatusCode::kCorruption);
    CHECK(s.message().find("exceeds the limit") != std::string::npos);
  }
  SUBCASE("payload larger than the agreed model") {
    auto s = decode_frame_header(header(FrameType::kParams, 10, (1 << 20) + 4), lim).status();
    CHECK(s.message().find("agreed model size") != std::string::npos);
  }
  SUBCASE("payload on a control frame") {
    CHECK(!decode_frame_header(header(FrameType::kHeartbeat, 4, 8), lim).is_ok());
  }
  SUBCASE("handshake frames only during the handshake, and vice versa") {
    CHECK(!decode_frame_header(header(FrameType::kHello, 10, 0), lim).is_ok());
    CHECK(!decode_frame_header(header(FrameType::kParams, 10, 8), handshake_limits()).is_ok());
    CHECK(decode_frame_header(header(FrameType::kHello, 10, 0), handshake_limits()).is_ok());
    CHECK(!decode_frame_header(header(FrameType::kHello, 5000, 0), handshake_limits()).is_ok());
  }
  SUBCASE("wrong length") {
    CHECK(!decode_frame_header(
               std::span<const std::uint8_t>(header(FrameType::kHello, 1, 0)).first(19), lim)
               .is_ok());
  }
}

TEST_CASE("encode_frame + parse_message round-trip, garbage does not parse") {
  pb::Params p = params(2, 4, 8192);
  p.set_crc32c(0xDEADBEEF);
  const std::string f = encode_frame(FrameType::kParams, p, 4096);
  const auto* bytes = reinterpret_cast<const std::uint8_t*>(f.data());
  auto h = decode_frame_header({bytes, kFrameHeaderBytes}, session_limits(16384));
  REQUIRE(h.is_ok());
  REQUIRE(h->header_len == f.size() - kFrameHeaderBytes);
  pb::Params q;
  REQUIRE(parse_message({bytes + kFrameHeaderBytes, h->header_len}, &q).is_ok());
  CHECK(q.crc32c() == 0xDEADBEEF);
  CHECK(q.byte_offset() == 8192);
  // A truncated message (last byte missing) must not parse as something else.
  pb::Params r;
  CHECK(!parse_message({bytes + kFrameHeaderBytes, h->header_len - 1}, &r).is_ok());
  const std::uint8_t junk[] = {0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x01};
  CHECK(!parse_message(junk, &r).is_ok());
}

TEST_CASE("a Params may omit its checksum on a TLS link only") {
  pb::Params p;
  p.set_chunk_index(2);
  p.set_iteration(9);
  p.set_crc32c(0x1234);
  CHECK(check_params_checksum_mode(p, false).is_ok());
  CHECK(check_params_checksum_mode(p, true).is_ok());
  p.set_crc32c_omitted(true);
  CHECK(check_params_checksum_mode(p, true).is_ok());
  const Status s = check_params_checksum_mode(p, false);
  CHECK(s.code() == StatusCode::kCorruption);
  CHECK(s.message().find("plaintext") != std::string::npos);
  CHECK(s.message().find("chunk 2 of iteration 9") != std::string::npos);
  // The flag survives the wire.
  pb::Params q;
  const std::string bytes = p.SerializeAsString();
  REQUIRE(parse_message({reinterpret_cast<const std::uint8_t*>(bytes.data()), bytes.size()}, &q)
              .is_ok());
  CHECK(q.crc32c_omitted());
}

TEST_CASE("validate_params accepts exactly the chunks that tile the model") {
  const std::uint64_t model = 10000;  // bytes
  CHECK(validate_params(params(0, 3, 0), 4096, model).is_ok());
  CHECK(validate_params(params(2, 3, 8192), 1808, model).is_ok());
  CHECK(validate_params(params(0, 1, 0), model, model).is_ok());
  CHECK(!validate_params(params(3, 3, 0), 4096, model).is_ok());       // index >= count
  CHECK(!validate_params(params(0, 0, 0), 4096, model).is_ok());       // zero count
  CHECK(!validate_params(params(0, 5000, 0), 4, model).is_ok());       // more chunks than floats
  CHECK(!validate_params(params(0, 3, 2), 4096, model).is_ok());       // misaligned offset
  CHECK(!validate_params(params(0, 3, 0), 4095, model).is_ok());       // misaligned length
  CHECK(!validate_params(params(1, 3, 8192), 4096, model).is_ok());    // past the end
  CHECK(!validate_params(params(2, 3, 4096), 1808, model).is_ok());    // last chunk short
  CHECK(!validate_params(params(0, 3, 0), 0, model).is_ok());          // empty
  CHECK(!validate_params(params(0, 3, ~0ull - 3), 8, model).is_ok());  // offset overflow
}

}  // namespace gossip::net
