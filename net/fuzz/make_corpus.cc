// Writes the seed corpus for the two fuzz targets (net/fuzz/corpus/<target>/): valid frames and
// frame sequences, so the fuzzer starts from inputs that reach deep into the decoders.
//   net_fuzz_make_corpus <net/fuzz/corpus>
#include <fstream>
#include <string>
#include <vector>

#include "net/checksum.h"
#include "net/handshake.h"

using namespace gossip::net;

namespace {

void put(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

std::string le32(std::uint32_t v) { return std::string(reinterpret_cast<char*>(&v), 4); }

// Params frames for iteration `it` of a model of `floats` floats, in chunks of `chunk_floats`;
// with `checksum` false they leave the CRC32C out, as TLS senders do.
std::string params_stream(std::uint32_t floats, std::uint32_t chunk_floats, std::uint64_t it,
                          bool checksum = true) {
  std::vector<float> x(floats);
  for (std::uint32_t i = 0; i < floats; ++i) x[i] = 0.5f * static_cast<float>(i);
  const std::uint32_t count = (floats + chunk_floats - 1) / chunk_floats;
  std::string out;
  for (std::uint32_t c = 0; c < count; ++c) {
    const std::uint32_t off = c * chunk_floats;
    const std::uint32_t n = std::min(chunk_floats, floats - off);
    pb::Params p;
    p.set_sender(1);
    p.set_iteration(it);
    p.set_chunk_index(c);
    p.set_chunk_count(count);
    p.set_byte_offset(std::uint64_t{off} * 4);
    if (checksum) {
      p.set_crc32c(crc32c(x.data() + off, n * 4));
    } else {
      p.set_crc32c_omitted(true);
    }
    out += encode_frame(FrameType::kParams, p, n * 4);
    out.append(reinterpret_cast<const char*>(x.data() + off), n * 4);
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) return 2;
  const std::string dir = argv[1];
  // frame_decoder: 4 bytes model size selector (value % 65536 + 1 floats; bit 31: a TLS link),
  // then frames.
  pb::Heartbeat hb;
  hb.set_sender(1);
  hb.set_iteration(5);
  pb::Goodbye bye;
  bye.set_reason("shutting down");
  put(dir + "/frame_decoder/heartbeat", le32(15) + encode_frame(FrameType::kHeartbeat, hb));
  put(dir + "/frame_decoder/params_one_chunk", le32(15) + params_stream(16, 16, 0));
  put(dir + "/frame_decoder/params_three_chunks", le32(39) + params_stream(40, 16, 7));
  put(dir + "/frame_decoder/two_iterations_and_goodbye",
      le32(39) + params_stream(40, 16, 1) + encode_frame(FrameType::kHeartbeat, hb) +
          params_stream(40, 32, 2) + encode_frame(FrameType::kGoodbye, bye));
  put(dir + "/frame_decoder/tls_params_without_checksum",
      le32(39 | 1u << 31) + params_stream(40, 16, 3, false));
  put(dir + "/frame_decoder/plaintext_params_without_checksum",
      le32(39) + params_stream(40, 16, 3, false));
  // hello: first byte = role (bit 0: HelloAck) | expected id << 1; then one frame.
  const Identity peer{"job-fuzz", 2, 0x1234567890ABCDEFull, 1000};
  pb::Hello h = make_hello(peer, 4, 17);
  put(dir + "/hello/hello_ok", std::string(1, char(2 << 1)) + encode_frame(FrameType::kHello, h));
  h.set_payload_crc_optional(true);  // as TLS nodes announce
  put(dir + "/hello/hello_tls", std::string(1, char(2 << 1)) + encode_frame(FrameType::kHello, h));
  (*h.mutable_extra())["fault.epoch"] = "3";
  put(dir + "/hello/hello_extra",
      std::string(1, char(2 << 1)) + encode_frame(FrameType::kHello, h));
  pb::Hello wrong = make_hello({"job-other", 2, 1, 999}, 1, 0);
  put(dir + "/hello/hello_mismatch",
      std::string(1, char(2 << 1)) + encode_frame(FrameType::kHello, wrong));
  pb::HelloAck ack;
  *ack.mutable_hello() = make_hello(peer, 2, 0);
  ack.set_accepted(true);
  put(dir + "/hello/ack_ok",
      std::string(1, char(1 | (2 << 1))) + encode_frame(FrameType::kHelloAck, ack));
  ack.set_accepted(false);
  ack.set_reason("topology fingerprint mismatch");
  put(dir + "/hello/ack_refused",
      std::string(1, char(1 | (2 << 1))) + encode_frame(FrameType::kHelloAck, ack));
  return 0;
}
