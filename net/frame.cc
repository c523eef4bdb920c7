// Framing: header encoding and the checks that run before any allocation (see frame.h).
#include "net/frame.h"

#include <google/protobuf/io/coded_stream.h>

#include <cstring>
#include <sstream>

#include "common/enum_names.h"
#include "common/little_endian.h"

namespace gossip::net {
namespace {

constexpr std::uint32_t kMaxHandshakeMessageBytes = 4096;
// Params, Heartbeat and Goodbye are a few dozen bytes; a Goodbye reason is truncated to fit.
constexpr std::uint32_t kMaxSessionMessageBytes = 1024;

bool known_type(std::uint8_t t) { return t >= 1 && t <= 5; }

}  // namespace

const char* frame_type_name(FrameType type) {
  static constexpr EnumName<FrameType> kNames[] = {{FrameType::kHello, "Hello"},
                                                   {FrameType::kHelloAck, "HelloAck"},
                                                   {FrameType::kParams, "Params"},
                                                   {FrameType::kHeartbeat, "Heartbeat"},
                                                   {FrameType::kGoodbye, "Goodbye"}};
  return enum_name(kNames, type, "unknown").data();  // the names are string literals
}

FrameLimits handshake_limits() { return {kMaxHandshakeMessageBytes, 0, true}; }

FrameLimits session_limits(std::uint64_t model_bytes) {
  return {kMaxSessionMessageBytes, model_bytes, false};
}

FrameHeaderBytes encode_frame_header(const FrameHeader& header) {
  FrameHeaderBytes b{};
  put_u32(b.data(), kFrameMagic);
  b[4] = kProtocolVersion;
  b[5] = static_cast<std::uint8_t>(header.type);
  put_u16(b.data() + 6, 0);
  put_u32(b.data() + 8, header.header_len);
  put_u64(b.data() + 12, header.payload_len);
  return b;
}

Result<FrameHeader> decode_frame_header(std::span<const std::uint8_t> bytes,
                                        const FrameLimits& limits) {
  if (bytes.size() != kFrameHeaderBytes) {
    return corruption("frame header is " + std::to_string(bytes.size()) + " bytes, expected " +
                      std::to_string(kFrameHeaderBytes));
  }
  const std::uint8_t* p = bytes.data();
  const auto magic = get_u32(p);
  if (magic != kFrameMagic) {
    std::ostringstream m;
    m << "bad frame magic 0x" << std::hex << magic << " (expected 0x" << kFrameMagic
      << "; is the peer speaking TLS to a plaintext node, or something else entirely?)";
    return corruption(m.str());
  }
  if (p[4] != kProtocolVersion) {
    return corruption("protocol version " + std::to_string(p[4]) + ", this build speaks " +
                      std::to_string(kProtocolVersion));
  }
  if (!known_type(p[5])) return corruption("unknown frame type " + std::to_string(p[5]));
  const auto flags = get_u16(p + 6);
  if (flags != 0) return corruption("reserved frame flags set: " + std::to_string(flags));
  FrameHeader h;
  h.type = static_cast<FrameType>(p[5]);
  h.header_len = get_u32(p + 8);
  h.payload_len = get_u64(p + 12);
  const bool handshake_type = h.type == FrameType::kHello || h.type == FrameType::kHelloAck;
  if (limits.handshake != handshake_type) {
    return corruption(
        std::string(frame_type_name(h.type)) + " frame " +
        (limits.handshake ? "before the handshake completed" : "after the handshake completed"));
  }
  if (h.header_len > limits.max_header_bytes) {
    return corruption(std::string(frame_type_name(h.type)) + " message of " +
                      std::to_string(h.header_len) + " bytes exceeds the limit of " +
                      std::to_string(limits.max_header_bytes));
  }
  if (h.type != FrameType::kParams && h.payload_len != 0) {
    return corruption(std::string(frame_type_name(h.type)) + " frame carries a payload of " +
                      std::to_string(h.payload_len) + " bytes; only Params may");
  }
  if (h.payload_len > limits.max_payload_bytes) {
    return corruption("payload of " + std::to_string(h.payload_len) +
                      " bytes exceeds the agreed model size of " +
                      std::to_string(limits.max_payload_bytes) + " bytes");
  }
  return h;
}

std::string encode_frame(FrameType type, const google::protobuf::MessageLite& message,
                         std::uint64_t payload_len) {
  const std::size_t n = message.ByteSizeLong();
  FrameHeader h{type, static_cast<std::uint32_t>(n), payload_len};
  const FrameHeaderBytes hb = encode_frame_header(h);
  std::string out(kFrameHeaderBytes + n, '\0');
  std::memcpy(out.data(), hb.data(), hb.size());
  message.SerializeWithCachedSizesToArray(reinterpret_cast<std::uint8_t*>(out.data()) +
                                          kFrameHeaderBytes);
  return out;
}

Status parse_message(std::span<const std::uint8_t> bytes, google::protobuf::MessageLite* message) {
  google::protobuf::io::CodedInputStream in(bytes.data(), static_cast<int>(bytes.size()));
  in.SetTotalBytesLimit(static_cast<int>(bytes.size()));
  in.SetRecursionLimit(8);
  if (!message->ParseFromCodedStream(&in) || !in.ConsumedEntireMessage()) {
    return corruption("malformed " + message->GetTypeName() + " message (" +
                      std::to_string(bytes.size()) + " bytes)");
  }
  return Status::ok();
}

Status validate_params(const pb::Params& params, std::uint64_t payload_len,
                       std::uint64_t model_bytes) {
  const std::uint64_t max_chunks = model_bytes / 4 == 0 ? 1 : model_bytes / 4;
  if (params.chunk_count() == 0 || params.chunk_count() > max_chunks) {
    return corruption("chunk count " + std::to_string(params.chunk_count()) + " outside [1, " +
                      std::to_string(max_chunks) + "]");
  }
  if (params.chunk_index() >= params.chunk_count()) {
    return corruption("chunk index " + std::to_string(params.chunk_index()) + " >= count " +
                      std::to_string(params.chunk_count()));
  }
  if (payload_len == 0 && model_bytes != 0) return corruption("empty Params payload");
  if (payload_len % 4 != 0 || params.byte_offset() % 4 != 0) {
    return corruption("Params chunk not float32-aligned (offset " +
                      std::to_string(params.byte_offset()) + ", length " +
                      std::to_string(payload_len) + ")");
  }
  if (params.byte_offset() > model_bytes || payload_len > model_bytes - params.byte_offset()) {
    return corruption("Params chunk [" + std::to_string(params.byte_offset()) + ", +" +
                      std::to_string(payload_len) + ") outside the model's " +
                      std::to_string(model_bytes) + " bytes");
  }
  const bool last = params.chunk_index() + 1 == params.chunk_count();
  if (last != (params.byte_offset() + payload_len == model_bytes)) {
    return corruption("chunk " + std::to_string(params.chunk_index()) + "/" +
                      std::to_string(params.chunk_count()) + " ends at byte " +
                      std::to_string(params.byte_offset() + payload_len) + " of " +
                      std::to_string(model_bytes));
  }
  return Status::ok();
}

Status check_params_checksum_mode(const pb::Params& params, bool tls_link) {
  if (params.crc32c_omitted() && !tls_link) {
    return corruption("Params without a payload checksum on a plaintext link (chunk " +
                      std::to_string(params.chunk_index()) + " of iteration " +
                      std::to_string(params.iteration()) + ")");
  }
  return Status::ok();
}

}  // namespace gossip::net
