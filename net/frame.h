// Framing: the fixed 20-byte header that precedes every message on a peer link, the limits it is
// checked against before anything is allocated, and bounded Protobuf parsing.
//
// Layout (little-endian), see docs/net.md "Wire format":
//   offset 0  u32 magic        0x50535347 ("GSSP" on the wire)
//          4  u8  version      kProtocolVersion
//          5  u8  type         FrameType
//          6  u16 flags        must be 0
//          8  u32 header_len   bytes of the Protobuf message that follows
//         12  u64 payload_len  raw payload bytes after the message (Params only)
//
// Everything here is a pure function of its inputs (no I/O, no allocation beyond the returned
// values), so the same code runs in the transport and in the fuzz targets.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "common/status.h"
#include "net/wire.pb.h"

namespace gossip::net {

inline constexpr std::uint32_t kFrameMagic = 0x50535347;
inline constexpr std::uint8_t kProtocolVersion = 1;
inline constexpr std::size_t kFrameHeaderBytes = 20;

enum class FrameType : std::uint8_t {
  kHello = 1,
  kHelloAck = 2,
  kParams = 3,
  kHeartbeat = 4,
  kGoodbye = 5,
};

const char* frame_type_name(FrameType type);

struct FrameHeader {
  FrameType type = FrameType::kHello;
  std::uint32_t header_len = 0;
  std::uint64_t payload_len = 0;
};

// Caps checked by decode_frame_header before the caller allocates anything for the frame.
struct FrameLimits {
  std::uint32_t max_header_bytes = 0;   // Protobuf message size
  std::uint64_t max_payload_bytes = 0;  // raw payload size (0: no payload allowed)
  bool handshake = false;               // only Hello / HelloAck are acceptable
};

// Limits during the handshake: a Hello or HelloAck of at most 4 KiB, no payload.
FrameLimits handshake_limits();
// Limits once the handshake succeeded: small control messages; payload at most the agreed model.
FrameLimits session_limits(std::uint64_t model_bytes);

using FrameHeaderBytes = std::array<std::uint8_t, kFrameHeaderBytes>;

FrameHeaderBytes encode_frame_header(const FrameHeader& header);

// Decodes and checks a header: magic, version, flags, a known type allowed in this phase,
// header_len and payload_len within `limits`, payload only on Params. Corruption otherwise, with
// a message naming the field and both values.
Result<FrameHeader> decode_frame_header(std::span<const std::uint8_t> bytes,
                                        const FrameLimits& limits);

// Header bytes + serialized message, ready to be followed by `payload_len` raw bytes.
std::string encode_frame(FrameType type, const google::protobuf::MessageLite& message,
                         std::uint64_t payload_len = 0);

// Parses exactly `bytes` into `message` with an explicit total-size and recursion limit.
// Corruption when the bytes are not a valid encoding of that message.
Status parse_message(std::span<const std::uint8_t> bytes, google::protobuf::MessageLite* message);

// Checks a Params message against the agreed model size and the frame's payload length: chunk
// index within count, count within what the model size allows, 4-byte alignment, chunk inside the
// buffer, last chunk ending exactly at the end, non-empty payload. Does not check ordering (the
// receiver does, it knows what came before).
Status validate_params(const pb::Params& params, std::uint64_t payload_len,
                       std::uint64_t model_bytes);

// A Params may leave out the payload's CRC32C (crc32c_omitted) only on a TLS link, where the
// AES-GCM tag of every record authenticates the payload. Corruption on a plaintext link.
Status check_params_checksum_mode(const pb::Params& params, bool tls_link);

}  // namespace gossip::net
