// Encoding of the attach protocol's messages (layout in attach_protocol.h). Written field by field
// in little-endian order, so the bytes are the same on every host and match the Python client's
// struct formats ("<IHHI", "<QII", ...).
#include "attach/protocol.h"

#include <algorithm>
#include <string_view>

#include "common/enum_names.h"

namespace gossip::attach {

namespace {

constexpr EnumName<Dtype> kDtypeNames[] = {{Dtype::kFloat32, "float32"},
                                           {Dtype::kFloat64, "float64"},
                                           {Dtype::kFloat16, "float16"},
                                           {Dtype::kBfloat16, "bfloat16"}};
constexpr EnumName<MessageType> kMessageTypeNames[] = {
    {MessageType::kHello, "HELLO"},  {MessageType::kWelcome, "WELCOME"},
    {MessageType::kPost, "POST"},    {MessageType::kMixed, "MIXED"},
    {MessageType::kError, "ERROR"},  {MessageType::kBye, "BYE"},
    {MessageType::kUpdate, "UPDATE"}};

}  // namespace

std::string dtype_name(std::uint32_t dtype) {
  const std::string_view name = enum_name(kDtypeNames, static_cast<Dtype>(dtype), "");
  return name.empty() ? "unknown dtype " + std::to_string(dtype) : std::string(name);
}

std::string message_type_name(std::uint16_t type) {
  const std::string_view name = enum_name(kMessageTypeNames, static_cast<MessageType>(type), "");
  return name.empty() ? "unknown type " + std::to_string(type) : std::string(name);
}

namespace {
std::byte* bytes_of(std::string& s, std::size_t offset) {
  return reinterpret_cast<std::byte*>(s.data()) + offset;
}
}  // namespace

std::string encode_header(MessageType type, std::uint32_t payload_bytes, std::uint16_t version) {
  std::string out(kHeaderBytes + payload_bytes, '\0');
  put_u32(bytes_of(out, 0), kMagic);
  put_u16(bytes_of(out, 4), version);
  put_u16(bytes_of(out, 6), static_cast<std::uint16_t>(type));
  put_u32(bytes_of(out, 8), payload_bytes);
  return out;
}

std::string encode_hello(const Hello& hello, std::uint16_t version) {
  std::string out = encode_header(MessageType::kHello, kHelloBytes, version);
  put_u64(bytes_of(out, kHeaderBytes), hello.num_params);
  put_u32(bytes_of(out, kHeaderBytes + 8), hello.dtype);
  put_u32(bytes_of(out, kHeaderBytes + 12), hello.flags);
  return out;
}

std::string encode_welcome(const Welcome& w) {
  std::string out = encode_header(MessageType::kWelcome, kWelcomeBytes);
  std::byte* p = bytes_of(out, kHeaderBytes);
  put_u64(p + 0, w.num_params);
  put_u32(p + 8, w.dtype);
  put_u32(p + 12, w.flags);
  put_u64(p + 16, w.buffer_bytes);
  put_u64(p + 24, w.params_offset);
  put_u64(p + 32, w.start_iteration);
  put_u32(p + 40, w.node_id);
  put_u32(p + 44, w.num_nodes);
  put_u64(p + 48, w.update_offset);
  put_u32(p + 56, w.local_steps);
  put_u32(p + 60, 0);
  return out;
}

std::string encode_iteration(MessageType type, std::uint64_t iteration) {
  std::string out = encode_header(type, kIterationBytes);
  put_u64(bytes_of(out, kHeaderBytes), iteration);
  return out;
}

std::string encode_update(const Update& update) {
  std::string out = encode_header(MessageType::kUpdate, kUpdateBytes);
  put_u64(bytes_of(out, kHeaderBytes), update.iteration);
  put_f32(bytes_of(out, kHeaderBytes + 8), update.gamma);
  return out;
}

std::string encode_error(ErrorCode code, std::string_view text) {
  const std::size_t text_bytes = std::min<std::size_t>(text.size(), kMaxPayloadBytes - 4);
  std::string out = encode_header(MessageType::kError, static_cast<std::uint32_t>(4 + text_bytes));
  put_u32(bytes_of(out, kHeaderBytes), static_cast<std::uint32_t>(code));
  std::copy_n(text.data(), text_bytes, out.data() + kHeaderBytes + 4);
  return out;
}

std::string encode_bye() { return encode_header(MessageType::kBye, 0); }

Header decode_header(std::span<const std::byte> bytes) {
  Header h;
  h.magic = get_u32(bytes.data());
  h.version = get_u16(bytes.data() + 4);
  h.type = get_u16(bytes.data() + 6);
  h.payload_bytes = get_u32(bytes.data() + 8);
  return h;
}

Hello decode_hello(std::span<const std::byte> payload) {
  Hello h;
  h.num_params = get_u64(payload.data());
  h.dtype = get_u32(payload.data() + 8);
  h.flags = get_u32(payload.data() + 12);
  return h;
}

Welcome decode_welcome(std::span<const std::byte> payload) {
  const std::byte* p = payload.data();
  Welcome w;
  w.num_params = get_u64(p + 0);
  w.dtype = get_u32(p + 8);
  w.flags = get_u32(p + 12);
  w.buffer_bytes = get_u64(p + 16);
  w.params_offset = get_u64(p + 24);
  w.start_iteration = get_u64(p + 32);
  w.node_id = get_u32(p + 40);
  w.num_nodes = get_u32(p + 44);
  w.update_offset = get_u64(p + 48);
  w.local_steps = get_u32(p + 56);
  return w;
}

Update decode_update(std::span<const std::byte> payload) {
  Update u;
  u.iteration = get_u64(payload.data());
  u.gamma = get_f32(payload.data() + 8);
  return u;
}

}  // namespace gossip::attach
