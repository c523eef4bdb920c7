// libFuzzer target: the frame decoder of an established link, as bytes arrive from a peer.
//
// Input: 4 bytes choosing the agreed model size (floats, low 16 bits) and whether the link is TLS
// (bit 31), then the byte stream the peer sends. Runs the same steps as a session's read loop
// (net/transport.cc): header against the session limits, bounded Protobuf parse of the message,
// Params checks, the in-order chunk rule and the CRC32C of the payload (which a Params may leave
// out on a TLS link only). Also asserts invariants: a decoded header re-encodes to the same bytes,
// and an accepted chunk lies inside the model buffer.
#include <cstdint>
#include <cstring>

#include "net/checksum.h"
#include "net/frame.h"

using namespace gossip::net;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 4) return 0;
  std::uint32_t floats;
  std::memcpy(&floats, data, 4);
  const bool tls = (floats >> 31) != 0;
  floats = floats % (1u << 16) + 1;
  const std::uint64_t model_bytes = std::uint64_t{floats} * 4;
  const FrameLimits limits = session_limits(model_bytes);
  std::span<const std::uint8_t> in(data + 4, size - 4);
  std::uint32_t next_chunk = 0, chunk_count = 0;
  std::uint64_t next_offset = 0;
  while (in.size() >= kFrameHeaderBytes) {
    auto h = decode_frame_header(in.first(kFrameHeaderBytes), limits);
    if (!h.is_ok()) return 0;
    const FrameHeaderBytes again = encode_frame_header(*h);
    if (std::memcmp(again.data(), in.data(), kFrameHeaderBytes) != 0) __builtin_trap();
    in = in.subspan(kFrameHeaderBytes);
    if (in.size() < h->header_len) return 0;  // truncated: the session would wait, then time out
    const auto msg = in.first(h->header_len);
    in = in.subspan(h->header_len);
    switch (h->type) {
      case FrameType::kParams: {
        pb::Params p;
        if (!parse_message(msg, &p).is_ok()) return 0;
        if (!validate_params(p, h->payload_len, model_bytes).is_ok()) return 0;
        if (!check_params_checksum_mode(p, tls).is_ok()) return 0;
        if (p.crc32c_omitted() && !tls) __builtin_trap();
        if (p.byte_offset() + h->payload_len > model_bytes) __builtin_trap();
        if (p.chunk_index() != next_chunk || p.byte_offset() != next_offset ||
            (next_chunk > 0 && p.chunk_count() != chunk_count)) {
          return 0;
        }
        if (in.size() < h->payload_len) return 0;
        if (!p.crc32c_omitted() && crc32c(in.data(), h->payload_len) != p.crc32c()) return 0;
        in = in.subspan(h->payload_len);
        chunk_count = p.chunk_count();
        next_offset += h->payload_len;
        if (++next_chunk == chunk_count) {
          if (next_offset != model_bytes) __builtin_trap();
          next_chunk = 0;
          next_offset = 0;
        }
        break;
      }
      case FrameType::kHeartbeat: {
        pb::Heartbeat hb;
        if (!parse_message(msg, &hb).is_ok()) return 0;
        break;
      }
      case FrameType::kGoodbye: {
        pb::Goodbye g;
        (void)parse_message(msg, &g);
        return 0;
      }
      default:
        __builtin_trap();  // handshake frames cannot pass session limits
    }
  }
  return 0;
}
