// The Hello exchange that follows the TLS handshake (or the TCP connect in --insecure mode):
// what a node says about itself and the checks it applies to what its peer says.
//
// Protocol: the dialer (the lower node id) sends Hello; the acceptor checks it and answers
// HelloAck{its own Hello, accepted, reason}; the dialer checks the acceptor's Hello. Either side
// closes on the first disagreement and logs which field differed. Nothing else is parsed before
// this succeeds. Pure functions, thread-safe.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "common/status.h"
#include "net/frame.h"
#include "net/wire.pb.h"

namespace gossip::net {

// What must match on both ends of every link of a job.
struct Identity {
  std::string job_id;
  int node_id = -1;
  std::uint64_t topology_fingerprint = 0;
  std::uint64_t param_count = 0;  // float32 elements of the flat parameter vector
  // How the nodes combine their work, opaque to net ("allreduce"); sent as Hello.extra
  // ["algorithm"] when not empty. Empty is the default algorithm (what peers that predate the
  // field run), so those still agree with each other.
  std::string algorithm{};
};

pb::Hello make_hello(const Identity& self, std::uint32_t degree, std::uint64_t iteration);

// Two algorithm entries of the form "name key=value ..." (daemon settings, config/sgd_config.h):
// "key: peer A, ours B" for the first setting that differs, or nullopt when they are not of that
// form or do not differ by a setting.
std::optional<std::string> differing_setting(std::string_view peer, std::string_view ours);

// Checks a peer's Hello against our identity: protocol version, job id, algorithm, topology
// fingerprint, model fingerprint (parameter count and dtype), and that it claims to be
// `expected_peer` (the id its certificate names, or the neighbour we dialed). PermissionDenied for
// an identity mismatch, InvalidArgument for a configuration mismatch; the message names the field
// and both values, e.g. "topology fingerprint mismatch: peer 0x12, ours 0x34".
Status check_peer_hello(const pb::Hello& peer, const Identity& self, int expected_peer);

// Decodes one complete handshake frame (header + message, nothing after it) of the given type
// from `bytes`, with handshake limits. Used by the fuzz target; the transport runs the same steps
// as bytes arrive.
Result<pb::Hello> decode_hello_frame(std::span<const std::uint8_t> bytes);
Result<pb::HelloAck> decode_hello_ack_frame(std::span<const std::uint8_t> bytes);

}  // namespace gossip::net
