// Hello construction and checks (see handshake.h).
#include "net/handshake.h"

#include <algorithm>
#include <optional>
#include <sstream>
#include <string_view>
#include <vector>

namespace gossip::net {
namespace {

std::string hex(std::uint64_t v) {
  std::ostringstream s;
  s << "0x" << std::hex << v;
  return s.str();
}

template <typename Message>
Result<Message> decode_handshake_frame(std::span<const std::uint8_t> bytes, FrameType want) {
  if (bytes.size() < kFrameHeaderBytes) {
    return corruption("truncated handshake frame: " + std::to_string(bytes.size()) + " bytes");
  }
  GOSSIP_ASSIGN_OR_RETURN(FrameHeader h,
                          decode_frame_header(bytes.first(kFrameHeaderBytes), handshake_limits()));
  if (h.type != want) {
    return corruption(std::string("expected ") + frame_type_name(want) + ", got " +
                      frame_type_name(h.type));
  }
  if (bytes.size() - kFrameHeaderBytes != h.header_len) {
    return corruption("handshake frame declares " + std::to_string(h.header_len) +
                      " message bytes, has " + std::to_string(bytes.size() - kFrameHeaderBytes));
  }
  Message m;
  GOSSIP_RETURN_IF_ERROR(parse_message(bytes.subspan(kFrameHeaderBytes), &m));
  return m;
}

constexpr std::string_view kAlgorithmKey = "algorithm";

}  // namespace

pb::Hello make_hello(const Identity& self, std::uint32_t degree, std::uint64_t iteration) {
  pb::Hello h;
  h.set_protocol_version(kProtocolVersion);
  h.set_job_id(self.job_id);
  h.set_node_id(static_cast<std::uint32_t>(self.node_id));
  h.set_topology_fingerprint(self.topology_fingerprint);
  h.mutable_model()->set_param_count(self.param_count);
  h.mutable_model()->set_dtype(pb::DTYPE_FLOAT32);
  h.set_degree(degree);
  h.set_iteration(iteration);
  if (!self.algorithm.empty()) (*h.mutable_extra())[std::string(kAlgorithmKey)] = self.algorithm;
  return h;
}

Status check_peer_hello(const pb::Hello& peer, const Identity& self, int expected_peer) {
  if (peer.protocol_version() != kProtocolVersion) {
    return invalid_argument("protocol version mismatch: peer " +
                            std::to_string(peer.protocol_version()) + ", ours " +
                            std::to_string(kProtocolVersion));
  }
  if (peer.node_id() != static_cast<std::uint32_t>(expected_peer)) {
    return permission_denied("Hello claims node " + std::to_string(peer.node_id()) +
                             ", expected node " + std::to_string(expected_peer));
  }
  if (peer.job_id() != self.job_id) {
    return invalid_argument("job id mismatch: peer '" + peer.job_id().substr(0, 128) + "', ours '" +
                            self.job_id + "'");
  }
  const auto algorithm = peer.extra().find(std::string(kAlgorithmKey));
  const std::string peer_algorithm = algorithm != peer.extra().end() ? algorithm->second : "";
  if (peer_algorithm != self.algorithm) {
    if (std::optional<std::string> field = differing_setting(peer_algorithm, self.algorithm)) {
      return invalid_argument("training config mismatch: " + *field +
                              " (every node of a job needs the same algorithm settings)");
    }
    auto name = [](const std::string& a) {
      return a.empty() ? std::string("default (dpsgd)") : "'" + a + "'";
    };
    return invalid_argument("algorithm mismatch: peer runs " + name(peer_algorithm.substr(0, 200)) +
                            ", ours " + name(self.algorithm) +
                            " (every node of a job needs the same training config algorithm)");
  }
  if (peer.topology_fingerprint() != self.topology_fingerprint) {
    return invalid_argument("topology fingerprint mismatch: peer " +
                            hex(peer.topology_fingerprint()) + ", ours " +
                            hex(self.topology_fingerprint) + " (different topology files?)");
  }
  if (peer.model().dtype() != pb::DTYPE_FLOAT32) {
    return invalid_argument("model dtype mismatch: peer " + std::to_string(peer.model().dtype()) +
                            ", ours float32");
  }
  if (peer.model().param_count() != self.param_count) {
    return invalid_argument("model fingerprint mismatch: peer has " +
                            std::to_string(peer.model().param_count()) + " parameters, ours " +
                            std::to_string(self.param_count));
  }
  return Status::ok();
}

std::optional<std::string> differing_setting(std::string_view peer, std::string_view ours) {
  // "name key=value key=value ...": the same name, then the first key whose values differ.
  auto split = [](std::string_view text) {
    std::vector<std::string_view> words;
    for (std::size_t at = 0; at < text.size();) {
      const std::size_t space = std::min(text.find(' ', at), text.size());
      if (space > at) words.push_back(text.substr(at, space - at));
      at = space + 1;
    }
    return words;
  };
  const std::vector<std::string_view> p = split(peer), o = split(ours);
  if (p.size() < 2 || o.size() < 2 || p[0] != o[0]) return std::nullopt;
  auto value_of = [](const std::vector<std::string_view>& words, std::string_view key) {
    for (std::string_view w : words) {
      const std::size_t eq = w.find('=');
      if (eq != std::string_view::npos && w.substr(0, eq) == key) return w.substr(eq + 1);
    }
    return std::string_view("(unset)");
  };
  for (const std::vector<std::string_view>* side : {&o, &p}) {
    for (std::size_t k = 1; k < side->size(); ++k) {
      const std::string_view w = (*side)[k];
      const std::string_view key = w.substr(0, w.find('='));
      const std::string_view a = value_of(p, key), b = value_of(o, key);
      if (a != b) {
        return std::string(key.substr(0, 64)) + ": peer " + std::string(a.substr(0, 64)) +
               ", ours " + std::string(b.substr(0, 64));
      }
    }
  }
  return std::nullopt;
}

Result<pb::Hello> decode_hello_frame(std::span<const std::uint8_t> bytes) {
  return decode_handshake_frame<pb::Hello>(bytes, FrameType::kHello);
}

Result<pb::HelloAck> decode_hello_ack_frame(std::span<const std::uint8_t> bytes) {
  return decode_handshake_frame<pb::HelloAck>(bytes, FrameType::kHelloAck);
}

}  // namespace gossip::net
