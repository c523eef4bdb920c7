// The attach protocol on the wire (docs/attach.md): how an external trainer and gossipd talk over
// a Unix-domain stream socket. Only control messages travel through the socket; the parameters live
// in a shared-memory buffer (a memfd) that gossipd creates and hands to the trainer with
// SCM_RIGHTS in its WELCOME.
//
// Every message is a 12-byte header followed by `payload_bytes` bytes of payload. All integers are
// little-endian, fixed width, unaligned:
//
//   header   u32 magic = kMagic ("GSAT" as bytes), u16 version, u16 type, u32 payload_bytes
//   HELLO    trainer -> daemon: u64 num_params, u32 dtype, u32 flags (kHelloUpdate)
//   WELCOME  daemon -> trainer, carries the memfd (SCM_RIGHTS): u64 num_params, u32 dtype,
//            u32 flags, u64 buffer_bytes, u64 params_offset, u64 start_iteration, u32 node_id,
//            u32 num_nodes, u64 update_offset (0: no update region), u32 local_steps (H: the
//            trainer takes H steps of its own between POSTs; 1: one per POST), u32 reserved (0)
//   POST     trainer -> daemon: u64 iteration (x_t is in the parameter region)
//   UPDATE   trainer -> daemon, only in a session whose HELLO set kHelloUpdate, after POST(t):
//            u64 iteration, f32 gamma, u32 reserved (0); u_t is in the update region
//   MIXED    daemon -> trainer: u64 iteration (x_{t+1} is in the parameter region:
//            sum_j W_ij x_j^t, minus gamma u_t in an update session)
//   ERROR    either way: u32 code (ErrorCode), then UTF-8 text (the rest of the payload)
//   BYE      either way, empty: a clean end; the sender closes the connection next
//
// The magic, the header and the ERROR layout are frozen across versions, so that a peer speaking
// another version can still read why it is refused. This file is pure encoding: no I/O.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "common/little_endian.h"

namespace gossip::attach {

inline constexpr std::uint32_t kMagic = 0x54415347;  // bytes 'G' 'S' 'A' 'T' read little-endian
inline constexpr std::uint16_t kProtocolVersion = 3;
inline constexpr std::size_t kHeaderBytes = 12;
inline constexpr std::uint32_t kMaxPayloadBytes = 64 * 1024;  // error texts are cut to fit
inline constexpr std::size_t kHelloBytes = 16;
inline constexpr std::size_t kWelcomeBytes = 64;
inline constexpr std::size_t kIterationBytes = 8;  // POST and MIXED
inline constexpr std::size_t kUpdateBytes = 16;

enum class MessageType : std::uint16_t {
  kHello = 1,
  kWelcome = 2,
  kPost = 3,
  kMixed = 4,
  kError = 5,
  kBye = 6,
  kUpdate = 7,
};

// Element types a trainer may announce. Only kFloat32 is accepted; the others are named so that a
// refusal can say what was asked for.
enum class Dtype : std::uint32_t { kFloat32 = 1, kFloat64 = 2, kFloat16 = 3, kBfloat16 = 4 };

enum class ErrorCode : std::uint32_t {
  kRefused = 1,   // handshake refused: version, dtype or parameter count (the text says which)
  kProtocol = 2,  // a malformed or unexpected message
  kAborted = 3,   // the sender stops (daemon left the group, trainer failed); the text says why
};

// HELLO flags.
inline constexpr std::uint32_t kHelloUpdate = 1;  // the trainer sends UPDATE(t) after POST(t):
                                                  // the daemon fuses -gamma u_t into its mix
inline constexpr std::uint32_t kHelloFlagsKnown = kHelloUpdate;

// WELCOME flags.
inline constexpr std::uint32_t kFlagBufferInitialized = 1;  // the buffer holds parameters the
                                                            // trainer must load before its step

struct Header {
  std::uint32_t magic = kMagic;
  std::uint16_t version = kProtocolVersion;
  std::uint16_t type = 0;
  std::uint32_t payload_bytes = 0;
};

struct Hello {
  std::uint64_t num_params = 0;
  std::uint32_t dtype = static_cast<std::uint32_t>(Dtype::kFloat32);
  std::uint32_t flags = 0;
};

struct Welcome {
  std::uint64_t num_params = 0;
  std::uint32_t dtype = static_cast<std::uint32_t>(Dtype::kFloat32);
  std::uint32_t flags = 0;
  std::uint64_t buffer_bytes = 0;
  std::uint64_t params_offset = 0;
  std::uint64_t start_iteration = 0;
  std::uint32_t node_id = 0;
  std::uint32_t num_nodes = 1;
  std::uint64_t update_offset = 0;  // 0: the session has no update region
  std::uint32_t local_steps = 1;  // the trainer's own steps per POST (training config local_steps)
};

struct Update {
  std::uint64_t iteration = 0;
  float gamma = 0.0f;
};

// "float32", "bfloat16", or "unknown dtype 9".
std::string dtype_name(std::uint32_t dtype);
// "HELLO", ..., or "unknown type 9".
std::string message_type_name(std::uint16_t type);

// ---- Whole messages (header + payload) as bytes.
std::string encode_header(MessageType type, std::uint32_t payload_bytes,
                          std::uint16_t version = kProtocolVersion);
std::string encode_hello(const Hello& hello, std::uint16_t version = kProtocolVersion);
std::string encode_welcome(const Welcome& welcome);
std::string encode_iteration(MessageType type, std::uint64_t iteration);  // POST or MIXED
std::string encode_update(const Update& update);
std::string encode_error(ErrorCode code, std::string_view text);  // text cut to fit
std::string encode_bye();

// Header fields of the first kHeaderBytes of `bytes` (no validation).
Header decode_header(std::span<const std::byte> bytes);
Hello decode_hello(std::span<const std::byte> payload);      // payload.size() == kHelloBytes
Welcome decode_welcome(std::span<const std::byte> payload);  // payload.size() == kWelcomeBytes
Update decode_update(std::span<const std::byte> payload);    // payload.size() == kUpdateBytes

}  // namespace gossip::attach
