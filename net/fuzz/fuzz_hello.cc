// libFuzzer target: the Hello / HelloAck handling, i.e. everything parsed from a peer before the
// link is established (after TLS, or right after connect in --insecure mode).
//
// Input: the bytes a peer sends. The first byte picks the role (acceptor reading a Hello, or
// dialer reading a HelloAck); the rest is decoded with handshake limits and checked against a
// fixed local identity, as the session does. Asserts that an accepted Hello really matches.
#include <cstdint>

#include "net/handshake.h"

using namespace gossip::net;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 1) return 0;
  static const Identity self{"job-fuzz", 3, 0x1234567890ABCDEFull, 1000};
  std::span<const std::uint8_t> in(data + 1, size - 1);
  const pb::Hello* hello = nullptr;
  pb::HelloAck ack_storage;
  pb::Hello hello_storage;
  if (data[0] & 1) {
    auto ack = decode_hello_ack_frame(in);
    if (!ack.is_ok()) return 0;
    ack_storage = std::move(*ack);
    if (!ack_storage.accepted()) return 0;
    hello = &ack_storage.hello();
  } else {
    auto h = decode_hello_frame(in);
    if (!h.is_ok()) return 0;
    hello_storage = std::move(*h);
    hello = &hello_storage;
  }
  const int expected = (data[0] >> 1) & 7;
  if (check_peer_hello(*hello, self, expected).is_ok()) {
    if (hello->job_id() != self.job_id ||
        hello->node_id() != static_cast<std::uint32_t>(expected) ||
        hello->topology_fingerprint() != self.topology_fingerprint ||
        hello->model().param_count() != self.param_count) {
      __builtin_trap();
    }
  }
  return 0;
}
